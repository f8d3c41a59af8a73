package main

import (
	"reflect"
	"testing"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		want    options
		wantErr bool
	}{
		{nil, options{}, false},
		{[]string{"--kubeconfig", "/tmp/k", "--namespace", "a", "--namespace", "b"}, options{kubeconfigPath: "/tmp/k", namespaces: stringList{"a", "b"}}, false},
		{[]string{"--apiserver-arg", "feature-gates=A=true", "--apiserver-arg", "runtime-config=x/v1=true"},
			options{apiserverArgs: stringList{"feature-gates=A=true", "runtime-config=x/v1=true"}}, false},
		{[]string{"--apiserver-arg", "no-value"}, options{}, true},
		{[]string{"--apiserver-arg", "--feature-gates=A=true"}, options{}, true},
		{[]string{"extra"}, options{}, true},
		{[]string{"--nope"}, options{}, true},
	}
	for _, tt := range tests {
		got, err := parseFlags(tt.args)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseFlags(%q) error = %v", tt.args, err)
			continue
		}
		if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseFlags(%q) = %+v, want %+v", tt.args, got, tt.want)
		}
	}
}
