package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/cdcapply/cdcapply/apply"
)

// kubernetesVersion is the API version the manifests are validated
// against (kubernetes-validate 1.37.0 bundles the schemas up to it).
const kubernetesVersion = "1.37.0"

// manifests returns every YAML document under deploy/kubernetes by file.
func manifests(t *testing.T) map[string][]map[string]any {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string][]map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc != nil {
				out[f] = append(out[f], doc)
			}
		}
	}
	return out
}

// kubernetesValidate runs kubernetes-validate --strict (unknown fields are
// errors) on files and returns its output and whether it passed. A kind
// it has no schema for is only a warning there, so the caller checks that
// every kind but ServiceMonitor "passed".
func kubernetesValidate(t *testing.T, kv string, files ...string) (string, bool) {
	t.Helper()
	args := append([]string{"--strict", "-k", kubernetesVersion}, files...)
	out, err := exec.Command(kv, args...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run kubernetes-validate: %v", err)
		}
		return string(out), false
	}
	return string(out), true
}

func TestKubernetesManifestsValidate(t *testing.T) {
	kv := tool(t, "CDCAPPLY_KUBERNETES_VALIDATE", "kubernetes-validate")
	docs := manifests(t)
	var files []string
	for f := range docs {
		files = append(files, f)
	}
	sort.Strings(files)
	out, ok := kubernetesValidate(t, kv, files...)
	if !ok {
		t.Fatalf("kubernetes-validate rejected the manifests:\n%s", out)
	}
	t.Logf("kubernetes-validate:\n%s", out)
	for _, f := range files {
		for _, doc := range docs[f] {
			kind, _ := doc["kind"].(string)
			name, _ := doc["metadata"].(map[string]any)["name"].(string)
			if kind == "ServiceMonitor" {
				continue // TestServiceMonitorValidates
			}
			want := "INFO " + f + " passed for resource " + strings.ToLower(kind) + "/" + name
			if !strings.Contains(out, want) {
				t.Errorf("%s %s/%s was not validated against a schema (no %q line):\n%s", f, kind, name, want, out)
			}
		}
	}

	// A broken manifest must be rejected: a wrong type, and (strict) a
	// misspelt field that a lenient check would ignore.
	dir := t.TempDir()
	for name, bad := range map[string]string{
		"type.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: bad}
spec:
  replicas: two
  selector: {matchLabels: {app: bad}}
  template:
    metadata: {labels: {app: bad}}
    spec: {containers: [{name: c, image: i}]}
`,
		"field.yaml": `apiVersion: v1
kind: Service
metadata: {name: bad}
spec:
  ports: [{name: metrics, port: 9464, targetport: metrics}]
`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, ok := kubernetesValidate(t, kv, p); ok {
			t.Errorf("kubernetes-validate accepted the broken manifest %s:\n%s", name, out)
		}
	}
}

// serviceMonitorSchema compiles the ServiceMonitor CRD's openAPIV3Schema as
// a JSON Schema, strict like a structural schema's pruning: an object with
// properties (and no x-kubernetes-preserve-unknown-fields) takes no others.
func serviceMonitorSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	path := os.Getenv("CDCAPPLY_SERVICEMONITOR_CRD")
	if path == "" {
		path = filepath.Join(repoRoot(t), ".cache", "tools", "servicemonitors-crd.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ServiceMonitor CRD: %v (run scripts/tools.sh)", err)
		}
		t.Skipf("ServiceMonitor CRD: %v (run scripts/tools.sh)", err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1" {
			schema = v.Schema.OpenAPIV3Schema
		}
	}
	if schema == nil {
		t.Fatal("the CRD has no v1 schema")
	}
	strict(schema)
	// Round-trip through the library's decoder so numbers are json.Number.
	raw, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4) // OpenAPI v3 schema objects are draft-4 shaped
	if err := c.AddResource("servicemonitor.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("servicemonitor.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func strict(s map[string]any) {
	if props, ok := s["properties"].(map[string]any); ok {
		if _, set := s["additionalProperties"]; !set && s["x-kubernetes-preserve-unknown-fields"] != true {
			s["additionalProperties"] = false
		}
		for _, p := range props {
			if m, ok := p.(map[string]any); ok {
				strict(m)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if m, ok := s[k].(map[string]any); ok {
			strict(m)
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if l, ok := s[k].([]any); ok {
			for _, x := range l {
				if m, ok := x.(map[string]any); ok {
					strict(m)
				}
			}
		}
	}
}

// asJSON turns a YAML document into the types the validator expects.
func asJSON(t *testing.T, doc any) any {
	t.Helper()
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestServiceMonitorValidates(t *testing.T) {
	sch := serviceMonitorSchema(t)
	found := 0
	var good map[string]any
	for f, docs := range manifests(t) {
		for _, doc := range docs {
			if doc["kind"] != "ServiceMonitor" {
				continue
			}
			found++
			good = doc
			if doc["apiVersion"] != "monitoring.coreos.com/v1" {
				t.Errorf("%s: apiVersion %v", f, doc["apiVersion"])
			}
			if err := sch.Validate(asJSON(t, doc)); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
	if found == 0 {
		t.Fatal("no ServiceMonitor manifest")
	}
	// Broken ServiceMonitors must be rejected: a misspelt field and a
	// wrong type.
	for name, edit := range map[string]func(spec map[string]any){
		"misspelt endpoints": func(spec map[string]any) { spec["endpoint"] = spec["endpoints"]; delete(spec, "endpoints") },
		"interval type":      func(spec map[string]any) { spec["endpoints"].([]any)[0].(map[string]any)["interval"] = 15 },
	} {
		var bad map[string]any
		raw, _ := json.Marshal(good)
		if err := json.Unmarshal(raw, &bad); err != nil {
			t.Fatal(err)
		}
		edit(bad["spec"].(map[string]any))
		if err := sch.Validate(asJSON(t, bad)); err == nil {
			t.Errorf("%s: the broken ServiceMonitor validated", name)
		}
	}
}

// TestManifestsAgree checks what no schema can: the ConfigMap's pipeline
// is valid for cdcapply (the code behind `cdcapply config validate`), the
// Deployment runs it from where the ConfigMap is mounted, every *_env the
// pipeline names is set, the probes and the metrics port match
// metrics.address, and the Service, ServiceMonitor and PDB select the pod.
func TestManifestsAgree(t *testing.T) {
	byKind := map[string]map[string]any{}
	for _, docs := range manifests(t) {
		for _, doc := range docs {
			byKind[doc["kind"].(string)] = doc
		}
	}
	for _, k := range []string{"ConfigMap", "Deployment", "Service", "ServiceMonitor", "PodDisruptionBudget", "PersistentVolumeClaim", "Secret"} {
		if byKind[k] == nil {
			t.Fatalf("no %s manifest", k)
		}
	}
	pipelineYAML, _ := get(byKind["ConfigMap"], "data", "pipeline.yaml").(string)
	cfg, err := apply.ParseConfig("configmap pipeline.yaml", []byte(pipelineYAML))
	if err != nil {
		t.Fatalf("the ConfigMap's pipeline.yaml is not valid: %v", err)
	}

	pod := get(byKind["Deployment"], "spec", "template", "spec").(map[string]any)
	ctr := get(pod, "containers").([]any)[0].(map[string]any)
	args := strings.Join(toStrings(ctr["args"]), " ")
	if !strings.HasPrefix(args, "run -c /etc/cdcapply/pipeline.yaml") {
		t.Errorf("container args %q do not run the mounted pipeline", args)
	}
	mounted := false
	for _, m := range ctr["volumeMounts"].([]any) {
		mm := m.(map[string]any)
		if mm["mountPath"] == "/etc/cdcapply" {
			for _, v := range pod["volumes"].([]any) {
				vv := v.(map[string]any)
				if vv["name"] == mm["name"] && get(vv, "configMap", "name") == get(byKind["ConfigMap"], "metadata", "name") {
					mounted = true
				}
			}
		}
	}
	if !mounted {
		t.Error("the ConfigMap is not mounted at /etc/cdcapply")
	}
	env := map[string]map[string]any{}
	for _, e := range ctr["env"].([]any) {
		ee := e.(map[string]any)
		env[ee["name"].(string)] = ee
		if _, literal := ee["value"]; literal && strings.Contains(strings.ToLower(ee["name"].(string)), "password") {
			t.Errorf("env %s carries a literal value", ee["name"])
		}
	}
	if cfg.Kafka.SASL != nil && cfg.Kafka.SASL.PasswordEnv != "" {
		e := env[cfg.Kafka.SASL.PasswordEnv]
		ref, _ := get(e, "valueFrom", "secretKeyRef").(map[string]any)
		if ref == nil {
			t.Errorf("kafka.sasl.password_env %s is not set from a secretKeyRef", cfg.Kafka.SASL.PasswordEnv)
		} else if ref["name"] != get(byKind["Secret"], "metadata", "name") {
			t.Errorf("secretKeyRef names %v, the example Secret is %v", ref["name"], get(byKind["Secret"], "metadata", "name"))
		}
	}
	_, port, _ := strings.Cut(cfg.Metrics.Address, ":")
	ports := ctr["ports"].([]any)
	if len(ports) != 1 || jsonString(get(ports[0].(map[string]any), "containerPort")) != port {
		t.Errorf("container ports %v, want the metrics.address port %s", ports, port)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if get(ctr, probe, "httpGet", "path") != path || get(ctr, probe, "httpGet", "port") != "metrics" {
			t.Errorf("%s is not %s on the metrics port: %v", probe, path, ctr[probe])
		}
	}
	for _, tb := range cfg.Tables {
		if !strings.HasPrefix(tb.Location, "/var/lib/cdcapply/") {
			t.Errorf("table %s location %s is not on the volume mounted at /var/lib/cdcapply", tb.Name, tb.Location)
		}
	}
	if get(byKind["Deployment"], "spec", "replicas") != 1 || get(byKind["Deployment"], "spec", "strategy", "type") != "Recreate" {
		t.Error("the Deployment must run one replica with the Recreate strategy (one writer per table)")
	}
	podLabels, _ := get(byKind["Deployment"], "spec", "template", "metadata", "labels").(map[string]any)
	svcLabels, _ := get(byKind["Service"], "metadata", "labels").(map[string]any)
	for what, sel := range map[string]any{
		"Deployment selector":     get(byKind["Deployment"], "spec", "selector", "matchLabels"),
		"Service selector":        get(byKind["Service"], "spec", "selector"),
		"PodDisruptionBudget":     get(byKind["PodDisruptionBudget"], "spec", "selector", "matchLabels"),
		"ServiceMonitor selector": get(byKind["ServiceMonitor"], "spec", "selector", "matchLabels"),
	} {
		labels := podLabels
		if what == "ServiceMonitor selector" {
			labels = svcLabels
		}
		m, _ := sel.(map[string]any)
		if len(m) == 0 {
			t.Errorf("%s is empty", what)
		}
		for k, v := range m {
			if labels[k] != v {
				t.Errorf("%s %s=%v does not match the labels %v", what, k, v, labels)
			}
		}
	}
	svcPort, _ := get(byKind["Service"], "spec", "ports").([]any)
	smEndpoints, _ := get(byKind["ServiceMonitor"], "spec", "endpoints").([]any)
	if len(svcPort) != 1 || len(smEndpoints) != 1 ||
		get(svcPort[0], "name") != get(smEndpoints[0], "port") || get(smEndpoints[0], "path") != "/metrics" {
		t.Errorf("the ServiceMonitor endpoint %v does not scrape /metrics on the Service port %v", smEndpoints, svcPort)
	}
}

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func toStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }
