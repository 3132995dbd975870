// Package registry is a small schema registry speaking the Confluent Schema
// Registry REST API (see the schemaregistry command's doc for the scope).
// It is importable so tests can serve it in-process with httptest.
package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/linkedin/goavro/v2"
)

// Error codes of the Confluent API that clients branch on.
const (
	codeSubjectNotFound = 40401
	codeVersionNotFound = 40402
	codeSchemaNotFound  = 40403
	codeInvalidSchema   = 42201
	codeInvalidVersion  = 42202
	codeBadCompat       = 42203
)

type storedSchema struct {
	ID         int               `json:"id"`
	Schema     string            `json:"schema"`
	SchemaType string            `json:"schemaType,omitempty"`
	References []json.RawMessage `json:"references,omitempty"`
}

// persisted is the registry's whole state, as saved to the state file.
type persisted struct {
	Schemas  []storedSchema    `json:"schemas"`
	Subjects map[string][]int  `json:"subjects"` // subject -> schema id per version (version = index+1)
	Config   map[string]string `json:"config"`   // subject ("" = global) -> compatibility level
}

// Registry is the registry's state and HTTP API.
type Registry struct {
	mu    sync.Mutex
	path  string
	st    persisted
	byKey map[string]int // schemaType + "\x00" + normalized text -> id
}

// Open loads the registry from the JSON state file at path (empty: memory
// only; a missing file starts empty).
func Open(path string) (*Registry, error) {
	r := &Registry{path: path, byKey: map[string]int{}}
	r.st.Subjects = map[string][]int{}
	r.st.Config = map[string]string{"": "BACKWARD"}
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			if err := json.Unmarshal(b, &r.st); err != nil {
				return nil, fmt.Errorf("decode state %s: %w", path, err)
			}
		case !os.IsNotExist(err):
			return nil, fmt.Errorf("read state %s: %w", path, err)
		}
	}
	for _, s := range r.st.Schemas {
		r.byKey[schemaKey(s.SchemaType, s.Schema)] = s.ID
	}
	return r, nil
}

// save writes the state file atomically; callers hold mu.
func (r *Registry) save() error {
	if r.path == "" {
		return nil
	}
	b, err := json.Marshal(r.st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	tmp := r.path + ".tmp"
	if err := os.MkdirAll(filepath.Dir(r.path), 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		return fmt.Errorf("replace state: %w", err)
	}
	return nil
}

// schemaKey identifies schema content: JSON text is compacted so that
// whitespace differences do not mint new ids.
func schemaKey(typ, text string) string {
	if typ == "" {
		typ = "AVRO"
	}
	var buf bytes.Buffer
	if typ != "PROTOBUF" && json.Compact(&buf, []byte(text)) == nil {
		text = buf.String()
	}
	return typ + "\x00" + text
}

func apiError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"error_code": code, "message": msg})
}

// Handler serves the Confluent API.
func (r *Registry) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]any{}) })
	mux.HandleFunc("GET /schemas/types", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, []string{"AVRO", "JSON", "PROTOBUF"})
	})
	mux.HandleFunc("GET /schemas/ids/{id}", r.getByID)
	mux.HandleFunc("GET /schemas/ids/{id}/schema", r.getByID)
	mux.HandleFunc("GET /schemas/ids/{id}/subjects", r.subjectsOfID)
	mux.HandleFunc("GET /schemas/ids/{id}/versions", r.subjectsOfID)
	mux.HandleFunc("GET /subjects", r.listSubjects)
	mux.HandleFunc("POST /subjects/{subject}/versions", r.register)
	mux.HandleFunc("POST /subjects/{subject}", r.lookup)
	mux.HandleFunc("GET /subjects/{subject}/versions", r.listVersions)
	mux.HandleFunc("GET /subjects/{subject}/versions/{version}", r.getVersion)
	mux.HandleFunc("GET /subjects/{subject}/versions/{version}/schema", r.getVersion)
	mux.HandleFunc("DELETE /subjects/{subject}", r.deleteSubject)
	mux.HandleFunc("GET /config", r.getConfig)
	mux.HandleFunc("PUT /config", r.putConfig)
	mux.HandleFunc("GET /config/{subject}", r.getConfig)
	mux.HandleFunc("PUT /config/{subject}", r.putConfig)
	mux.HandleFunc("GET /mode", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]string{"mode": "READWRITE"})
	})
	return mux
}

func (r *Registry) schemaByID(id int) (storedSchema, bool) {
	if id < 1 || id > len(r.st.Schemas) {
		return storedSchema{}, false
	}
	return r.st.Schemas[id-1], true
}

func (r *Registry) getByID(w http.ResponseWriter, req *http.Request) {
	id, err := strconv.Atoi(req.PathValue("id"))
	r.mu.Lock()
	s, ok := r.schemaByID(id)
	r.mu.Unlock()
	if err != nil || !ok {
		apiError(w, 404, codeSchemaNotFound, "Schema "+req.PathValue("id")+" not found")
		return
	}
	if strings.HasSuffix(req.URL.Path, "/schema") {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = w.Write([]byte(s.Schema))
		return
	}
	out := map[string]any{"schema": s.Schema}
	if s.SchemaType != "" && s.SchemaType != "AVRO" {
		out["schemaType"] = s.SchemaType
	}
	if len(s.References) > 0 {
		out["references"] = s.References
	}
	writeJSON(w, 200, out)
}

func (r *Registry) subjectsOfID(w http.ResponseWriter, req *http.Request) {
	id, err := strconv.Atoi(req.PathValue("id"))
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.schemaByID(id); err != nil || !ok {
		apiError(w, 404, codeSchemaNotFound, "Schema "+req.PathValue("id")+" not found")
		return
	}
	var subjects []string
	type sv struct {
		Subject string `json:"subject"`
		Version int    `json:"version"`
	}
	var versions []sv
	for _, name := range r.sortedSubjects() {
		for i, sid := range r.st.Subjects[name] {
			if sid == id {
				subjects = append(subjects, name)
				versions = append(versions, sv{name, i + 1})
			}
		}
	}
	if strings.HasSuffix(req.URL.Path, "/versions") {
		writeJSON(w, 200, versions)
		return
	}
	writeJSON(w, 200, subjects)
}

func (r *Registry) sortedSubjects() []string {
	names := make([]string, 0, len(r.st.Subjects))
	for n := range r.st.Subjects {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (r *Registry) listSubjects(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	writeJSON(w, 200, r.sortedSubjects())
}

type registerRequest struct {
	Schema     string            `json:"schema"`
	SchemaType string            `json:"schemaType"`
	References []json.RawMessage `json:"references"`
}

func decodeRegister(w http.ResponseWriter, req *http.Request) (registerRequest, bool) {
	var body registerRequest
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil || body.Schema == "" {
		apiError(w, 422, codeInvalidSchema, "request body must be {\"schema\": \"...\"}")
		return body, false
	}
	if body.SchemaType == "" {
		body.SchemaType = "AVRO"
	}
	switch body.SchemaType {
	case "AVRO":
		// Schemas with references cannot be parsed on their own; accept them
		// as given, as the reference resolution is the client's business.
		if len(body.References) == 0 {
			if _, err := goavro.NewCodec(body.Schema); err != nil {
				apiError(w, 422, codeInvalidSchema, "Invalid schema: "+err.Error())
				return body, false
			}
		}
	case "JSON":
		if !json.Valid([]byte(body.Schema)) {
			apiError(w, 422, codeInvalidSchema, "Invalid schema: not JSON")
			return body, false
		}
	case "PROTOBUF":
	default:
		apiError(w, 422, codeInvalidSchema, "unknown schemaType "+body.SchemaType)
		return body, false
	}
	return body, true
}

func (r *Registry) register(w http.ResponseWriter, req *http.Request) {
	body, ok := decodeRegister(w, req)
	if !ok {
		return
	}
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	key := schemaKey(body.SchemaType, body.Schema)
	id, known := r.byKey[key]
	if !known {
		id = len(r.st.Schemas) + 1
		typ := body.SchemaType
		if typ == "AVRO" {
			typ = ""
		}
		r.st.Schemas = append(r.st.Schemas, storedSchema{ID: id, Schema: body.Schema, SchemaType: typ, References: body.References})
		r.byKey[key] = id
	}
	for _, sid := range r.st.Subjects[subject] {
		if sid == id {
			writeJSON(w, 200, map[string]int{"id": id})
			return
		}
	}
	r.st.Subjects[subject] = append(r.st.Subjects[subject], id)
	if err := r.save(); err != nil {
		apiError(w, 500, 50001, err.Error())
		return
	}
	writeJSON(w, 200, map[string]int{"id": id})
}

func (r *Registry) versionBody(subject string, version, id int) map[string]any {
	s, _ := r.schemaByID(id)
	out := map[string]any{"subject": subject, "version": version, "id": id, "schema": s.Schema}
	if s.SchemaType != "" {
		out["schemaType"] = s.SchemaType
	}
	if len(s.References) > 0 {
		out["references"] = s.References
	}
	return out
}

func (r *Registry) lookup(w http.ResponseWriter, req *http.Request) {
	body, ok := decodeRegister(w, req)
	if !ok {
		return
	}
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, found := r.st.Subjects[subject]
	if !found {
		apiError(w, 404, codeSubjectNotFound, "Subject '"+subject+"' not found.")
		return
	}
	id, known := r.byKey[schemaKey(body.SchemaType, body.Schema)]
	for i, sid := range ids {
		if known && sid == id {
			writeJSON(w, 200, r.versionBody(subject, i+1, id))
			return
		}
	}
	apiError(w, 404, codeSchemaNotFound, "Schema not found")
}

func (r *Registry) listVersions(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, found := r.st.Subjects[subject]
	if !found {
		apiError(w, 404, codeSubjectNotFound, "Subject '"+subject+"' not found.")
		return
	}
	vs := make([]int, len(ids))
	for i := range ids {
		vs[i] = i + 1
	}
	writeJSON(w, 200, vs)
}

func (r *Registry) getVersion(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, found := r.st.Subjects[subject]
	if !found {
		apiError(w, 404, codeSubjectNotFound, "Subject '"+subject+"' not found.")
		return
	}
	v := req.PathValue("version")
	n := len(ids)
	if v != "latest" && v != "-1" {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 1 {
			apiError(w, 422, codeInvalidVersion, "The specified version '"+v+"' is not a valid version id.")
			return
		}
	}
	if n < 1 || n > len(ids) {
		apiError(w, 404, codeVersionNotFound, "Version "+v+" not found.")
		return
	}
	body := r.versionBody(subject, n, ids[n-1])
	if strings.HasSuffix(req.URL.Path, "/schema") {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = w.Write([]byte(body["schema"].(string)))
		return
	}
	writeJSON(w, 200, body)
}

func (r *Registry) deleteSubject(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, found := r.st.Subjects[subject]
	if !found {
		apiError(w, 404, codeSubjectNotFound, "Subject '"+subject+"' not found.")
		return
	}
	delete(r.st.Subjects, subject)
	if err := r.save(); err != nil {
		apiError(w, 500, 50001, err.Error())
		return
	}
	vs := make([]int, len(ids))
	for i := range ids {
		vs[i] = i + 1
	}
	writeJSON(w, 200, vs)
}

var compatLevels = map[string]bool{
	"NONE": true, "BACKWARD": true, "BACKWARD_TRANSITIVE": true, "FORWARD": true,
	"FORWARD_TRANSITIVE": true, "FULL": true, "FULL_TRANSITIVE": true,
}

func (r *Registry) getConfig(w http.ResponseWriter, req *http.Request) {
	subject := req.PathValue("subject")
	r.mu.Lock()
	defer r.mu.Unlock()
	level, ok := r.st.Config[subject]
	if !ok {
		if req.URL.Query().Get("defaultToGlobal") != "true" {
			apiError(w, 404, codeSubjectNotFound, "Subject '"+subject+"' does not have subject-level compatibility configured")
			return
		}
		level = r.st.Config[""]
	}
	writeJSON(w, 200, map[string]string{"compatibilityLevel": level})
}

// putConfig records a compatibility level. The level is reported back but
// not enforced: this registry accepts every valid schema.
func (r *Registry) putConfig(w http.ResponseWriter, req *http.Request) {
	var body struct {
		Compatibility string `json:"compatibility"`
	}
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil || !compatLevels[body.Compatibility] {
		apiError(w, 422, codeBadCompat, "Invalid compatibility level")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Config[req.PathValue("subject")] = body.Compatibility
	if err := r.save(); err != nil {
		apiError(w, 500, 50001, err.Error())
		return
	}
	writeJSON(w, 200, map[string]string{"compatibility": body.Compatibility})
}

// writeJSON writes v with the registry's content type.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
