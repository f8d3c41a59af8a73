package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// abiCosts runs the C program that calls the .so in loops and returns its
// "name value" lines (nanoseconds per call).
func abiCosts(program, kubeconfig string) (map[string]float64, error) {
	cmd := exec.Command(program, benchNamespace)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", program, err)
	}
	res := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				res[f[0]] = v
			}
		}
	}
	return res, nil
}
