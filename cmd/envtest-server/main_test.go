package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseFlagsNamesTheBadValue(t *testing.T) {
	for args, want := range map[string]string{
		"-etcd-members 0":  "-etcd-members 0: want 1 to 7",
		"-apiservers 10":   "-apiservers 10: want 1 to 9",
		"-etcd-arg x":      `-etcd-arg "x": want KEY=VALUE`,
		"-apiservers -1":   "-apiservers -1: want 1 to 9",
		"-etcd-members 1x": `invalid value "1x" for flag -etcd-members`,
	} {
		_, err := parseFlags(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseFlags(%s) = %v, want an error with %q", args, err, want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		want    options
		wantErr bool
	}{
		{nil, options{etcdMembers: 1, apiservers: 1}, false},
		{[]string{"--kubeconfig", "/tmp/k", "--namespace", "a", "--namespace", "b"},
			options{kubeconfigPath: "/tmp/k", namespaces: stringList{"a", "b"}, etcdMembers: 1, apiservers: 1}, false},
		{[]string{"--apiserver-arg", "feature-gates=A=true", "--apiserver-arg", "runtime-config=x/v1=true"},
			options{apiserverArgs: stringList{"feature-gates=A=true", "runtime-config=x/v1=true"}, etcdMembers: 1, apiservers: 1}, false},
		{[]string{"-etcd-members", "3", "-apiservers", "2", "-etcd-arg", "election-timeout=3000"},
			options{etcdMembers: 3, apiservers: 2, etcdArgs: stringList{"election-timeout=3000"}}, false},
		{[]string{"-etcd-members", "4"}, options{etcdMembers: 4, apiservers: 1}, false}, // even: allowed
		{[]string{"-etcd-members", "0"}, options{}, true},
		{[]string{"-etcd-members", "8"}, options{}, true},
		{[]string{"-apiservers", "0"}, options{}, true},
		{[]string{"-apiservers", "10"}, options{}, true},
		{[]string{"-apiservers", "two"}, options{}, true},
		{[]string{"-etcd-arg", "--name=x"}, options{}, true},
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
