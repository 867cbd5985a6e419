package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// notBuiltYet lists the seed operations that no route serves yet. Each issue
// that builds one removes it here; TestSeedContract fails when an entry is
// built (remove it) or a seed operation is neither built nor listed.
var notBuiltYet = []string{}

type opInfo struct {
	method, path, id string
	node             map[string]any
}

func operations(doc map[string]any) []opInfo {
	var out []opInfo
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		for m, op := range item.(map[string]any) {
			switch m {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				node := op.(map[string]any)
				id, _ := node["operationId"].(string)
				out = append(out, opInfo{method: strings.ToUpper(m), path: p, id: id, node: node})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].method+out[i].path < out[j].method+out[j].path })
	return out
}

func ourDoc(t *testing.T) map[string]any {
	t.Helper()
	data, err := openAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	return mustJSON(data)
}

func seedDoc(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(seedPath)
	if err != nil {
		t.Fatalf("read the seed contract: %v", err)
	}
	return mustJSON(data)
}

func TestDocumentIsValidOpenAPI31(t *testing.T) {
	data, err := openAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(data)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("document invalid: %s: %s", e.Message, e.Reason)
		}
	}
	m := mustJSON(data)
	info := m["info"].(map[string]any)
	if info["version"] != "1.0.0" {
		t.Errorf("info.version = %v, want 1.0.0", info["version"])
	}
	if got := fmt.Sprint(m["servers"]); got != "[map[url:/api/client/v1]]" {
		t.Errorf("servers = %s, want the single /api/client/v1", got)
	}
}

// TestRoutesMatchDocument: every route of the table is an operation of the
// document with the same operationId, and every operation has a route.
func TestRoutesMatchDocument(t *testing.T) {
	s := &Server{}
	routes := map[string]string{}
	for _, rt := range s.table() {
		if rt.op == "" {
			t.Errorf("route %s %s has no operation id", rt.method, rt.path)
		}
		routes[rt.method+" "+rt.path] = rt.op
	}
	docOps := map[string]string{}
	for _, op := range operations(ourDoc(t)) {
		docOps[op.method+" "+op.path] = op.id
		// Every operation but the document itself documents 401 and 429.
		if op.id != "getOpenAPI" {
			resp := op.node["responses"].(map[string]any)
			for _, code := range []string{"401", "429", "500"} {
				if _, ok := resp[code]; !ok {
					t.Errorf("%s %s documents no %s response", op.method, op.path, code)
				}
			}
		}
	}
	for k, id := range routes {
		if docOps[k] != id {
			t.Errorf("route %s (%s): document has operationId %q", k, id, docOps[k])
		}
	}
	for k := range docOps {
		if _, ok := routes[k]; !ok {
			t.Errorf("document operation %s has no route", k)
		}
	}
}

// TestSeedContract compares every seed operation we serve with the seed's
// description: same path and method, same parameters, and every field the
// seed requires is required by us with the same type and nullability.
func TestSeedContract(t *testing.T) {
	seed, ours := seedDoc(t), ourDoc(t)
	seedOps := operations(seed)
	if len(seedOps) != 25 {
		t.Fatalf("seed has %d operations, want 25", len(seedOps))
	}
	ourOps := map[string]opInfo{}
	for _, op := range operations(ours) {
		ourOps[op.method+" "+op.path] = op
	}
	for _, sop := range seedOps {
		key := sop.method + " " + sop.path
		oop, built := ourOps[key]
		listed := slices.Contains(notBuiltYet, key)
		switch {
		case built && listed:
			t.Errorf("%s is built: remove it from notBuiltYet", key)
			continue
		case !built && !listed:
			t.Errorf("seed operation %s is neither built nor in notBuiltYet", key)
			continue
		case !built:
			continue
		}
		t.Run(key, func(t *testing.T) {
			if oop.id != sop.id {
				t.Errorf("operationId = %q, seed says %q", oop.id, sop.id)
			}
			compareParameters(t, seed, ours, sop.node, oop.node)
			if sb, ok := sop.node["requestBody"]; ok {
				ob, ok := oop.node["requestBody"]
				if !ok {
					t.Fatalf("no requestBody; the seed has one")
				}
				sc := mediaSchema(seed, resolve(seed, sb))
				oc := mediaSchema(ours, resolve(ours, ob))
				compareSchema(t, seed, ours, sc, oc, "requestBody")
			}
			sresp := sop.node["responses"].(map[string]any)
			oresp := oop.node["responses"].(map[string]any)
			for code, sr := range sresp {
				or, ok := oresp[code]
				if !ok {
					t.Errorf("response %s is missing; the seed documents it", code)
					continue
				}
				ss := mediaSchema(seed, resolve(seed, sr))
				os := mediaSchema(ours, resolve(ours, or))
				if ss != nil {
					compareSchema(t, seed, ours, ss, os, "responses."+code)
				}
			}
		})
	}
	for _, k := range notBuiltYet {
		found := false
		for _, sop := range seedOps {
			found = found || sop.method+" "+sop.path == k
		}
		if !found {
			t.Errorf("notBuiltYet lists %s, which is not a seed operation", k)
		}
	}
}

func resolve(doc map[string]any, v any) map[string]any {
	m, _ := v.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		m, _ = cur.(map[string]any)
	}
	return m
}

// mediaSchema is the schema of a body: application/json, else text/plain
// (the seed's write body), else none.
func mediaSchema(doc, resp map[string]any) map[string]any {
	content, _ := resp["content"].(map[string]any)
	for _, name := range []string{"application/json", "text/plain"} {
		if mt, _ := content[name].(map[string]any); mt != nil {
			return resolve(doc, mt["schema"])
		}
	}
	return nil
}

func compareParameters(t *testing.T, seed, ours, sop, oop map[string]any) {
	t.Helper()
	index := func(doc map[string]any, op map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		list, _ := op["parameters"].([]any)
		for _, p := range list {
			pm := resolve(doc, p)
			out[pm["in"].(string)+":"+pm["name"].(string)] = pm
		}
		return out
	}
	sp, op := index(seed, sop), index(ours, oop)
	for k, s := range sp {
		o, ok := op[k]
		if !ok {
			t.Errorf("parameter %s is missing", k)
			continue
		}
		if fmt.Sprint(s["required"]) != fmt.Sprint(o["required"]) {
			t.Errorf("parameter %s required = %v, seed says %v", k, o["required"], s["required"])
		}
		compareSchema(t, seed, ours, resolve(seed, s["schema"]), resolve(ours, o["schema"]), "parameter "+k)
	}
	for k, o := range op {
		if _, ok := sp[k]; !ok && o["required"] == true {
			t.Errorf("parameter %s is required but the seed does not have it", k)
		}
	}
}

func typeSet(s map[string]any) []string {
	var out []string
	switch v := s["type"].(type) {
	case string:
		out = []string{v}
	case []any:
		for _, x := range v {
			out = append(out, x.(string))
		}
	}
	if s["nullable"] == true {
		out = append(out, "null")
	}
	sort.Strings(out)
	return out
}

func compareSchema(t *testing.T, seed, ours, s, o map[string]any, path string) {
	t.Helper()
	if o == nil {
		t.Errorf("%s: no schema; the seed has one", path)
		return
	}
	if st, ot := typeSet(s), typeSet(o); len(st) > 0 && !slices.Equal(st, ot) {
		t.Errorf("%s: type %v, seed says %v", path, ot, st)
	}
	if f, ok := s["format"]; ok && o["format"] != f {
		t.Errorf("%s: format %v, seed says %v", path, o["format"], f)
	}
	sreq, _ := s["required"].([]any)
	oreq, _ := o["required"].([]any)
	sprops, _ := s["properties"].(map[string]any)
	oprops, _ := o["properties"].(map[string]any)
	for _, r := range sreq {
		name := r.(string)
		if !slices.Contains(oreq, any(name)) {
			t.Errorf("%s.%s: required by the seed, not by us", path, name)
		}
		op, ok := oprops[name]
		if !ok {
			t.Errorf("%s.%s: no such property", path, name)
			continue
		}
		compareSchema(t, seed, ours, resolve(seed, sprops[name]), resolve(ours, op), path+"."+name)
	}
	// Optional seed properties we do have must agree on type too.
	for name, sp := range sprops {
		if op, ok := oprops[name]; ok && !slices.Contains(sreq, any(name)) {
			compareSchema(t, seed, ours, resolve(seed, sp), resolve(ours, op), path+"."+name)
		}
	}
	if si, ok := s["items"]; ok {
		compareSchema(t, seed, ours, resolve(seed, si), resolve(ours, o["items"]), path+"[]")
	}
}

func TestServedDocumentIsTheEmbeddedOne(t *testing.T) {
	h := newHarness(t, sqliteDB(t))
	status, hdr, body := h.do("GET", Prefix+"/openapi.json", "", nil)
	if status != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("GET openapi.json = %d %s", status, hdr.Get("Content-Type"))
	}
	want, _ := openAPIJSON()
	if string(body) != string(want) {
		t.Fatal("served document differs from the embedded one")
	}
	var doc struct {
		Info struct{ Version string } `json:"info"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Info.Version != "1.0.0" {
		t.Fatalf("info.version = %q, %v", doc.Info.Version, err)
	}
}

func TestSeedCopyIsCurrent(t *testing.T) {
	shared, err := os.ReadFile(sharedSeed)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("SKIP: %s is not beside the repository; using the committed copy", sharedSeed)
	}
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile(seedPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shared, local) {
		t.Fatalf("%s differs from %s: copy the shared one over", seedPath, sharedSeed)
	}
}
