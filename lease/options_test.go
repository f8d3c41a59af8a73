package lease

import (
	"errors"
	"strings"
	"testing"
)

func TestElectionOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ElectionOptions
		want string // "" : valid
	}{
		{"none", ElectionOptions{}, ""},
		{"semantic version", ElectionOptions{Version: "v1.4.2", Priority: -3, Policy: PolicyHandOffOnCancel | PolicyYieldToNewer}, ""},
		{"not a version", ElectionOptions{Version: "latest"}, `version "latest"`},
		{"unknown policy flag", ElectionOptions{Policy: 8}, "unknown flags 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validate = %v, want an invalid argument naming %s", err, tc.want)
			}
		})
	}
}
