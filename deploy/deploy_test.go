package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// repoRoot is the repository root (the test runs in deploy/).
func repoRoot(t *testing.T) string {
	t.Helper()
	abs, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// tool finds an outside tool by its environment variable or in the
// repository's .cache/bin (scripts/tools.sh installs it there). Without
// it the test skips, except under CI=true, where it fails: CI must not
// pass by validating less.
func tool(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p := filepath.Join(repoRoot(t), ".cache", "bin", name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found (set %s or run scripts/tools.sh)", name, env)
	}
	t.Skipf("%s not found (set %s or run scripts/tools.sh)", name, env)
	return ""
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func loadDashboard(t *testing.T, data []byte) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dec.More() {
		t.Fatal("dashboard JSON: trailing data after the object")
	}
	return d
}

// checkDashboard returns every problem of a dashboard: panel ids not
// unique, a panel without a Prometheus datasource from the ${datasource}
// variable or without a query, a query naming a metric cdcapply does not
// serve, missing variables.
func checkDashboard(d dashboard, reg map[string]bool) []string {
	var problems []string
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				problems = append(problems, "variable "+v.Name+": query is neither a string nor an object")
				continue
			}
			q.Query = s
		}
		problems = append(problems, checkExpr("variable "+v.Name, variableSelector(q.Query), reg)...)
		if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
			problems = append(problems, "variable "+v.Name+": datasource is not ${datasource}")
		}
	}
	if vars["datasource"] != "datasource" {
		problems = append(problems, "no datasource variable named datasource")
	}
	if vars["table"] != "query" {
		problems = append(problems, "no query variable named table")
	}
	ids := map[int]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			name := p.Title
			if prev, dup := ids[p.ID]; dup {
				problems = append(problems, "panel id "+strconv.Itoa(p.ID)+" used by "+prev+" and "+name)
			}
			ids[p.ID] = name
			if p.ID == 0 {
				problems = append(problems, "panel "+name+": no id")
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				problems = append(problems, "panel "+name+": datasource is not the ${datasource} Prometheus variable")
			}
			if len(p.Targets) == 0 {
				problems = append(problems, "panel "+name+": no target")
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					problems = append(problems, "panel "+name+" target "+tg.RefID+": datasource is not ${datasource}")
				}
				if strings.TrimSpace(tg.Expr) == "" {
					problems = append(problems, "panel "+name+" target "+tg.RefID+": empty query")
					continue
				}
				problems = append(problems, checkExpr("panel "+name+" target "+tg.RefID, tg.Expr, reg)...)
			}
		}
	}
	walk(d.Panels)
	return problems
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// variableSelector turns Grafana's label_values(selector, label) into its
// selector; any other variable query is PromQL already.
func variableSelector(q string) string {
	if m := labelValuesRE.FindStringSubmatch(q); m != nil {
		return m[1]
	}
	return q
}

// checkExpr reports an expression that does not scan, names no metric, or
// names one that is not served.
func checkExpr(where, expr string, reg map[string]bool) []string {
	names, err := MetricNames(expr)
	if err != nil {
		return []string{where + ": " + err.Error()}
	}
	if len(names) == 0 {
		return []string{where + ": names no metric: " + expr}
	}
	var problems []string
	for _, n := range names {
		if !metricKnown(reg, n) {
			problems = append(problems, where+": metric "+n+" is not registered by cdcapply run")
		}
	}
	return problems
}

func TestDashboard(t *testing.T) {
	reg := registeredMetrics(t)
	data, err := os.ReadFile("grafana/cdcapply-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	d := loadDashboard(t, data)
	if len(d.Panels) < 10 {
		t.Errorf("dashboard has %d panels, want the issue's set (lag, freshness, throughput, latencies, conflicts, quarantine, tombstones, halted, version)", len(d.Panels))
	}
	for _, p := range checkDashboard(d, reg) {
		t.Error(p)
	}
	// Every family the issue asks the dashboard to show is queried.
	all := string(data)
	for _, m := range []string{
		"cdcapply_partition_lag_records", "cdcapply_table_freshness_seconds", "cdcapply_records_total",
		"cdcapply_rows_written_total", "cdcapply_stage_duration_seconds_bucket", "cdcapply_commits_fenced_total",
		`outcome=\"quarantined\"`, "cdcapply_table_purge_horizon_seconds", "cdcapply_table_halted", "cdcapply_table_version",
		"cdcapply_table_rows", "cdcapply_key_index_refreshes_total", "cdcapply_table_log_files",
	} {
		if !strings.Contains(all, m) {
			t.Errorf("no panel queries %s", m)
		}
	}
}

// TestDashboardCheckRejects proves the dashboard check can fail: each
// broken dashboard must produce the named problem.
func TestDashboardCheckRejects(t *testing.T) {
	reg := registeredMetrics(t)
	const vars = `"templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"},
		{"name": "table", "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
		 "query": {"query": "label_values(cdcapply_table_running, table)"}}]}`
	const ds = `"datasource": {"type": "prometheus", "uid": "${datasource}"}`
	for _, tc := range []struct{ name, json, want string }{
		{"unknown metric", `{` + vars + `, "panels": [{"id": 1, "title": "p", ` + ds + `, "targets": [{"refId": "A", "expr": "rate(cdcapply_tombstones_total[5m])"}]}]}`,
			"metric cdcapply_tombstones_total is not registered"},
		{"duplicate id", `{` + vars + `, "panels": [{"id": 1, "title": "p", ` + ds + `, "targets": [{"refId": "A", "expr": "cdcapply_table_version"}]},
			{"id": 1, "title": "q", ` + ds + `, "targets": [{"refId": "A", "expr": "cdcapply_table_version"}]}]}`, "panel id 1 used by p and q"},
		{"no datasource", `{` + vars + `, "panels": [{"id": 1, "title": "p", "targets": [{"refId": "A", "expr": "cdcapply_table_version"}]}]}`,
			"panel p: datasource is not"},
		{"no target", `{` + vars + `, "panels": [{"id": 1, "title": "p", ` + ds + `, "targets": []}]}`, "panel p: no target"},
		{"variable metric", `{"templating": {"list": [{"name": "datasource", "type": "datasource"}, {"name": "table", "type": "query",
			"datasource": {"type": "prometheus", "uid": "${datasource}"}, "query": "label_values(cdcapply_tables, table)"}]}, "panels": []}`,
			"variable table: metric cdcapply_tables is not registered"},
		{"no table variable", `{"templating": {"list": [{"name": "datasource", "type": "datasource"}]}, "panels": []}`, "no query variable named table"},
	} {
		problems := checkDashboard(loadDashboard(t, []byte(tc.json)), reg)
		if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q do not contain %q", tc.name, problems, tc.want)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRules checks every rule names only served metrics and carries
// for:, a severity, a summary, a description and a runbook hint; and that
// each alert has a promtool unit test.
func TestAlertRules(t *testing.T) {
	reg := registeredMetrics(t)
	var rf ruleFile
	data, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("prometheus/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			for _, p := range checkExpr("alert "+r.Alert, r.Expr, reg) {
				t.Error(p)
			}
			if r.For == "" {
				t.Errorf("alert %s: no for:", r.Alert)
			}
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("alert %s: severity %q, want page or ticket", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no unit test in alerts_test.yml", r.Alert)
			}
		}
	}
	for _, want := range []string{"CdcapplyTableFreshnessOverSLA", "CdcapplyLagGrowing", "CdcapplyNoRowsWritten",
		"CdcapplyQuarantineRatioHigh", "CdcapplyTableHalted", "CdcapplyCommitConflictsSpiking"} {
		if !strings.Contains(string(data), "alert: "+want+"\n") {
			t.Errorf("the issue's alert %s is missing", want)
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
}

// TestPromtool runs promtool check rules and promtool test rules.
func TestPromtool(t *testing.T) {
	promtool := tool(t, "CDCAPPLY_PROMTOOL", "promtool")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
	// The unit tests can fail: a rule file whose alert lost its for: makes
	// the "must not fire yet" cases fail.
	dir := t.TempDir()
	rules, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(rules), "expr: cdcapply_table_halted == 1\n        for: 1m", "expr: cdcapply_table_halted == 1\n        for: 0m", 1)
	if broken == string(rules) {
		t.Fatal("the negative case no longer edits the rule file")
	}
	tests, err := os.ReadFile("prometheus/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"alerts.yml": broken, "alerts_test.yml": string(tests)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("promtool test rules passed on a rule file without the halted alert's for:\n%s", out)
	}
}
