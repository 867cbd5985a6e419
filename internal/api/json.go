package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"sort"
	"strings"

	"github.com/kilnhq/kiln/internal/validate"
)

// maxJSONBody caps JSON request bodies; larger ones are 413.
const maxJSONBody = 1 << 20

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to do
}

// decodeJSON reads a JSON request body into dst (a pointer to a struct)
// strictly: JSON media type, size cap, no unknown fields, no trailing data.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return newHTTPError(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			"Content-Type must be application/json")
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return newHTTPError(http.StatusRequestEntityTooLarge, codePayloadTooLarge,
				fmt.Sprintf("request body is larger than %d bytes", maxJSONBody))
		}
		return fmt.Errorf("read request body: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return validate.Errorf("", "request body is empty; a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err, data, dst)
	}
	// encoding/json matches keys case-insensitively; a key must be spelled
	// exactly as documented, so check the spelling too.
	if err := exactKeys(data, dst); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return validate.Errorf("", "unexpected data after the JSON value")
	}
	return nil
}

// jsonError turns a decoding error into a validation error with a path.
func jsonError(err error, data []byte, dst any) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return validate.Errorf("", "malformed JSON at byte %d: %s", se.Offset, se.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return validate.Errorf("", "malformed JSON: unexpected end of input")
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		path := te.Field
		if path == "" {
			return validate.Errorf("", "the body must be a JSON object, not %s", te.Value)
		}
		return validate.Errorf(path, "must be %s, not %s", jsonTypeName(te.Type), te.Value)
	}
	// encoding/json reports unknown fields without a typed error; find them
	// ourselves, with their full paths.
	if err := exactKeys(data, dst); err != nil {
		return err
	}
	return validate.Errorf("", "invalid JSON body: %v", err)
}

// exactKeys refuses object keys that dst's type does not name exactly.
func exactKeys(data []byte, dst any) error {
	var generic any
	if json.Unmarshal(data, &generic) != nil {
		return nil
	}
	unknown := unknownFields(generic, reflect.TypeOf(dst), "")
	if len(unknown) == 0 {
		return nil
	}
	var c validate.Collector
	for _, p := range unknown {
		c.Add(p, "unknown field")
	}
	return c.Err()
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	}
	return t.String()
}

// unknownFields lists the paths of object keys in v that type t has no
// field for, recursing through structs, slices and maps.
func unknownFields(v any, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	switch val := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			fields := jsonFields(t)
			keys := make([]string, 0, len(val))
			for k := range val {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				ft, ok := fields[k]
				if !ok {
					out = append(out, validate.Join(path, k))
					continue
				}
				out = append(out, unknownFields(val[k], ft, validate.Join(path, k))...)
			}
		case reflect.Map:
			for k, sub := range val {
				out = append(out, unknownFields(sub, t.Elem(), validate.Join(path, k))...)
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, sub := range val {
				out = append(out, unknownFields(sub, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return out
}

// jsonFields maps the JSON names of t's exported fields to their types,
// with encoding/json's case-insensitive fallback left out on purpose: a key
// must be spelled as documented.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		out[name] = f.Type
	}
	return out
}
