package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Manifest decodes the objects of deploy/<file>, in order: the tests apply
// the very manifests docs/operations.md tells users to apply.
func Manifest(file string) ([]runtime.Object, error) {
	path := filepath.Join(RepoRoot(), "deploy", file)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: decode %q: %w", path, doc, err)
		}
		objs = append(objs, obj)
	}
}

// FlowSchema is deploy/flowschema.yaml's FlowSchema for ServiceAccounts of
// namespace ns: the manifest's namespace (its ServiceAccount's) becomes ns
// wherever the manifest names it, and only there.
func FlowSchema(ns string) (*flowcontrolv1.FlowSchema, error) {
	objs, err := Manifest("flowschema.yaml")
	if err != nil {
		return nil, err
	}
	fs, ok := objs[0].(*flowcontrolv1.FlowSchema)
	if len(objs) != 1 || !ok {
		return nil, fmt.Errorf("deploy/flowschema.yaml: want one FlowSchema, got %d objects", len(objs))
	}
	for i := range fs.Spec.Rules {
		var manifestNS string
		for j := range fs.Spec.Rules[i].Subjects {
			if sa := fs.Spec.Rules[i].Subjects[j].ServiceAccount; sa != nil {
				manifestNS, sa.Namespace = sa.Namespace, ns
			}
		}
		for j := range fs.Spec.Rules[i].ResourceRules {
			for k, n := range fs.Spec.Rules[i].ResourceRules[j].Namespaces {
				if n == manifestNS {
					fs.Spec.Rules[i].ResourceRules[j].Namespaces[k] = ns
				}
			}
		}
	}
	return fs, nil
}
