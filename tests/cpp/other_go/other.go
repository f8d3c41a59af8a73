// Package main is a second, unrelated Go c-shared library, for the test
// that K8sLeaseInit refuses to run beside another Go runtime.
package main

import "C"

//export OtherGoAnswer
func OtherGoAnswer() C.int { return 42 }

func main() {}
