package api

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v4"
)

var update = flag.Bool("update", false, "rewrite docs/api.md from openapi.yaml")

// apiReference is the project's own API reference, generated from the
// OpenAPI document: users of the repository have no other copy.
const apiReference = "../../docs/api.md"

// TestAPIReferenceIsCurrent regenerates docs/api.md from openapi.yaml and
// fails when the file differs (rewrite it with -update).
func TestAPIReferenceIsCurrent(t *testing.T) {
	var doc map[string]any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		t.Fatal(err)
	}
	got := renderReference(doc)
	if *update {
		if err := os.WriteFile(apiReference, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(apiReference)
	if err != nil || !bytes.Equal(want, got) {
		t.Errorf("docs/api.md is not what openapi.yaml says (%v); run: go test ./internal/api -run TestAPIReferenceIsCurrent -update", err)
	}
}

func m(v any) map[string]any { x, _ := v.(map[string]any); return x }

func str(v any) string { s, _ := v.(string); return s }

// refName is the last part of a $ref.
func refName(v any) string {
	r := str(m(v)["$ref"])
	return r[strings.LastIndex(r, "/")+1:]
}

// schemaText describes a schema in a few words: a type, a reference, an
// array of either.
func schemaText(s map[string]any) string {
	if s == nil {
		return ""
	}
	if r := refName(s); r != "" {
		return "[" + r + "](#" + strings.ToLower(r) + ")"
	}
	typ := s["type"]
	if l, ok := typ.([]any); ok {
		var parts []string
		for _, x := range l {
			parts = append(parts, fmt.Sprint(x))
		}
		typ = strings.Join(parts, " or ")
	}
	t := fmt.Sprint(typ)
	if typ == nil {
		t = "object"
		if one, ok := s["oneOf"].([]any); ok {
			var parts []string
			for _, o := range one {
				parts = append(parts, schemaText(m(o)))
			}
			return strings.Join(parts, " or ")
		}
	}
	if t == "array" {
		return "array of " + schemaText(m(s["items"]))
	}
	if props := m(s["properties"]); t == "object" && len(props) > 0 {
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		sort.Strings(names)
		var parts []string
		for _, k := range names {
			parts = append(parts, "`"+k+"`: "+schemaText(m(props[k])))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	if e, ok := s["enum"].([]any); ok {
		var parts []string
		for _, x := range e {
			if x == nil {
				parts = append(parts, "`null`") // JSON's name, not Go's <nil>
				continue
			}
			parts = append(parts, fmt.Sprintf("`%v`", x))
		}
		t += " (" + strings.Join(parts, ", ") + ")"
	}
	var bounds []string
	for _, k := range []string{"minimum", "maximum", "minLength", "maxLength", "maxItems"} {
		if v, ok := s[k]; ok {
			bounds = append(bounds, fmt.Sprintf("%s %v", k, v))
		}
	}
	if len(bounds) > 0 {
		t += ", " + strings.Join(bounds, ", ")
	}
	return t
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(strings.ReplaceAll(s, "\n", " ")), "|", "\\|")
}

func renderReference(doc map[string]any) []byte {
	var b bytes.Buffer
	info := m(doc["info"])
	comps := m(doc["components"])
	fmt.Fprintf(&b, "# %s\n\n", str(info["title"]))
	b.WriteString("<!-- Generated from internal/api/openapi.yaml by `go test ./internal/api -run TestAPIReferenceIsCurrent -update`; do not edit. -->\n\n")
	fmt.Fprintf(&b, "%s\n", strings.TrimSpace(str(info["description"])))
	fmt.Fprintf(&b, "\nBase path: `%s`. The same document is served at `GET %s/openapi.json`.\n", str(m(doc["servers"].([]any)[0])["url"]), str(m(doc["servers"].([]any)[0])["url"]))

	paths := m(doc["paths"])
	keys := make([]string, 0, len(paths))
	for k := range paths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteString("\n## Endpoints\n\n| Method | Path | Summary |\n|---|---|---|\n")
	for _, p := range keys {
		for _, meth := range []string{"get", "post", "put", "patch", "delete"} {
			if op := m(m(paths[p])[meth]); op != nil {
				fmt.Fprintf(&b, "| %s | [`%s`](#%s) | %s |\n", strings.ToUpper(meth), p, strings.ToLower(str(op["operationId"])), oneLine(str(op["summary"])))
			}
		}
	}
	for _, p := range keys {
		for _, meth := range []string{"get", "post", "put", "patch", "delete"} {
			op := m(m(paths[p])[meth])
			if op == nil {
				continue
			}
			fmt.Fprintf(&b, "\n### %s\n\n`%s %s` — %s\n\n", str(op["operationId"]), strings.ToUpper(meth), p, oneLine(str(op["summary"])))
			if d := strings.TrimSpace(str(op["description"])); d != "" {
				b.WriteString(d + "\n\n")
			}
			params := append(slices.Clone(asList(m(paths[p])["parameters"])), asList(op["parameters"])...)
			if len(params) > 0 {
				b.WriteString("| Parameter | In | Type | Required | Meaning |\n|---|---|---|---|---|\n")
				for _, pv := range params {
					pm := m(pv)
					if r := refName(pm); r != "" {
						pm = m(m(comps["parameters"])[r])
					}
					req := ""
					if pm["required"] == true {
						req = "yes"
					}
					fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", str(pm["name"]), str(pm["in"]), schemaText(m(pm["schema"])), req, oneLine(str(pm["description"])))
				}
				b.WriteString("\n")
			}
			if rb := m(op["requestBody"]); rb != nil {
				content := m(rb["content"])
				cts := make([]string, 0, len(content))
				for ct := range content {
					cts = append(cts, ct)
				}
				sort.Strings(cts)
				for _, ct := range cts {
					fmt.Fprintf(&b, "Body (`%s`): %s\n\n", ct, schemaText(m(m(content[ct])["schema"])))
				}
			}
			resps := m(op["responses"])
			codes := make([]string, 0, len(resps))
			for c := range resps {
				codes = append(codes, c)
			}
			sort.Strings(codes)
			b.WriteString("| Status | Meaning |\n|---|---|\n")
			for _, c := range codes {
				rm := m(resps[c])
				if r := refName(rm); r != "" {
					rm = m(m(comps["responses"])[r])
				}
				desc := oneLine(str(rm["description"]))
				if ct := m(m(rm["content"])["application/json"]); ct != nil {
					if s := schemaText(m(ct["schema"])); s != "" && s != "object" {
						desc += " — " + s
					}
				}
				fmt.Fprintf(&b, "| %s | %s |\n", c, desc)
			}
		}
	}

	schemas := m(comps["schemas"])
	names := make([]string, 0, len(schemas))
	for n := range schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	b.WriteString("\n## Schemas\n")
	for _, n := range names {
		s := m(schemas[n])
		fmt.Fprintf(&b, "\n### %s\n\n", n)
		if d := strings.TrimSpace(str(s["description"])); d != "" {
			b.WriteString(d + "\n\n")
		}
		props := m(s["properties"])
		if len(props) == 0 {
			fmt.Fprintf(&b, "%s\n", schemaText(s))
			continue
		}
		required := map[string]bool{}
		for _, r := range asList(s["required"]) {
			required[str(r)] = true
		}
		pn := make([]string, 0, len(props))
		for k := range props {
			pn = append(pn, k)
		}
		sort.Strings(pn)
		b.WriteString("| Field | Type | Required | Meaning |\n|---|---|---|---|\n")
		for _, k := range pn {
			req := ""
			if required[k] {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k, schemaText(m(props[k])), req, oneLine(str(m(props[k])["description"])))
		}
	}
	return b.Bytes()
}

func asList(v any) []any { l, _ := v.([]any); return l }

// TestEveryErrorCodeDocumented: each code errors.go can answer is listed,
// with its status, in the document's ErrorResponse (and so in
// docs/api.md).
func TestEveryErrorCodeDocumented(t *testing.T) {
	src, err := os.ReadFile("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		t.Fatal(err)
	}
	desc := str(m(m(m(m(m(doc["components"])["schemas"])["ErrorResponse"])["properties"])["code"])["description"])
	codes := regexp.MustCompile(`code[A-Za-z]+ += "([A-Z_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(codes) < 20 {
		t.Fatalf("found %d codes in errors.go: the pattern is broken", len(codes))
	}
	for _, c := range codes {
		if !strings.Contains(desc, "`"+c[1]+"`") {
			t.Errorf("error code %s is not listed in ErrorResponse.code's description", c[1])
		}
	}
}

// TestSchemasHaveOnlyKeywords: every schema of the document (a
// property's, an item's, a component's) has only JSON Schema keywords as
// keys. A comma in an unquoted description of a flow mapping
// ({type: integer, description: a, b}) ends the description there and
// makes the rest a key: the description is cut short in docs/api.md and
// in every client generated from the document, silently.
func TestSchemasHaveOnlyKeywords(t *testing.T) {
	var doc map[string]any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		t.Fatal(err)
	}
	keywords := map[string]bool{}
	for _, k := range strings.Fields(`type description properties required items enum format minimum maximum
		minLength maxLength minItems maxItems pattern additionalProperties oneOf anyOf allOf $ref default example
		examples nullable const uniqueItems exclusiveMinimum exclusiveMaximum readOnly writeOnly deprecated title
		discriminator contentEncoding contentMediaType not propertyNames patternProperties minProperties maxProperties multipleOf`) {
		keywords[k] = true
	}
	var check func(path string, s map[string]any)
	check = func(path string, s map[string]any) {
		for k, v := range s {
			if !keywords[k] {
				t.Errorf("%s: key %q is no schema keyword (an unquoted description with a comma?)", path, k)
			}
			switch k {
			case "properties", "patternProperties":
				for name, p := range m(v) {
					check(path+"."+name, m(p))
				}
			case "items", "additionalProperties", "not":
				if sub := m(v); sub != nil {
					check(path+"."+k, sub)
				}
			case "oneOf", "anyOf", "allOf":
				for i, sub := range asList(v) {
					check(fmt.Sprintf("%s.%s[%d]", path, k, i), m(sub))
				}
			}
		}
	}
	for name, s := range m(m(doc["components"])["schemas"]) {
		check(name, m(s))
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, sub := range x {
				if k == "schema" {
					check(path, m(sub))
					continue
				}
				walk(path+"/"+k, sub)
			}
		case []any:
			for i, sub := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), sub)
			}
		}
	}
	walk("paths", doc["paths"])
}
