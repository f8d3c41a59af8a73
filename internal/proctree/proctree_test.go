package proctree

import (
	"os"
	"os/exec"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A name with a space and a ')' of its own: it runs to the last ')'.
	p, err := parseStat([]byte("4242 (a b) c) T 17 4242 4242 0 -1 4194560 100 0 0 0 31 7 0 0 20 0 1 0 123 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Proc{PID: 4242, PPID: 17, Comm: "a b) c", State: "T", UTime: 31, STime: 7}
	if p != want {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 0"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) did not fail", bad)
		}
	}
}

func TestChildAndArgs(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read line", "--marker") // waits on stdin
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid, err := Child(os.Getpid(), "sh", "--marker")
	if err != nil || pid != cmd.Process.Pid {
		t.Fatalf("Child = %d, %v; want %d", pid, err, cmd.Process.Pid)
	}
	if _, err := Child(os.Getpid(), "sh", "--other"); err == nil {
		t.Fatal("found a sh with --other")
	}
	if args, err := Args(pid); err != nil || len(args) != 4 || args[3] != "--marker" {
		t.Fatalf("Args = %q, %v", args, err)
	}
	if !Alive(pid) {
		t.Fatal("a running child is not alive")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if Alive(pid) {
		t.Fatal("a reaped child is alive")
	}
}

func TestComm(t *testing.T) {
	if got := Comm("kube-apiserver-extra"); got != "kube-apiserver-" {
		t.Fatalf("Comm = %q", got)
	}
}
