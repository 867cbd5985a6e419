package api

import (
	_ "embed"
	"encoding/json"
	"fmt"

	yaml "go.yaml.in/yaml/v4"
)

//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIJSON converts the embedded document to the JSON that is served.
func openAPIJSON() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("parse openapi.yaml: %w", err)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode openapi document: %w", err)
	}
	return out, nil
}
