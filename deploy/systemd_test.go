package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// systemdVerify runs systemd-analyze verify on a copy of unit whose
// ExecStart binary is replaced by /bin/true (verify checks that the binary
// exists). Any output counts as a problem: verify exits 0 on an unknown
// key or an unparsable value, printing only a warning.
func systemdVerify(t *testing.T, analyze, unit string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	unit = strings.ReplaceAll(unit, "/usr/local/bin/cdcapply", "/bin/true")
	p := filepath.Join(dir, "cdcapply.service")
	if err := os.WriteFile(p, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", p)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	return string(out), err == nil && strings.TrimSpace(string(out)) == ""
}

// TestSystemdUnit verifies the unit with systemd-analyze where it exists
// (not required in CI: a container has no systemd), and checks the
// hardening and restart settings the unit promises.
func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile("systemd/cdcapply.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(data)
	for _, want := range []string{"Restart=on-failure", "EnvironmentFile=/etc/cdcapply/cdcapply.env",
		"NoNewPrivileges=yes", "ProtectSystem=strict", "DynamicUser=yes", "StateDirectory=cdcapply",
		"CapabilityBoundingSet=\n", "SystemCallFilter=@system-service"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed; the unit's settings were checked by text only")
	}
	if out, ok := systemdVerify(t, analyze, unit); !ok {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
	for name, bad := range map[string]string{
		"misspelt key": strings.Replace(unit, "Restart=on-failure", "Restartt=on-failure", 1),
		"bad value":    strings.Replace(unit, "Restart=on-failure", "Restart=sometimes", 1),
		"relative":     strings.Replace(unit, "ExecStart=/usr/local/bin/cdcapply", "ExecStart=cdcapply/bin", 1),
	} {
		if bad == unit {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		if out, ok := systemdVerify(t, analyze, bad); ok {
			t.Errorf("%s: systemd-analyze verify accepted the broken unit (%s)", name, out)
		}
	}
}

// runFlags are the flags `cdcapply run` defines, read from its source.
func runFlags(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "cmd", "cdcapply", "run.go"))
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	start := strings.Index(body, "func runRun(")
	end := strings.Index(body[start:], "fs.Parse(")
	if start < 0 || end < 0 {
		t.Fatal("cmd/cdcapply/run.go: no runRun flag set")
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`fs\.[A-Za-z]+\("([^"]+)"`).FindAllStringSubmatch(body[start:start+end], -1) {
		flags[m[1]] = true
	}
	if !flags["c"] {
		t.Fatalf("run's flags %v lack -c", flags)
	}
	return flags
}

// checkRunArgs reports a command line that is not `run` with known flags.
func checkRunArgs(args []string, flags map[string]bool) []string {
	if len(args) == 0 || args[0] != "run" {
		return []string{"not a `run` command line: " + strings.Join(args, " ")}
	}
	var problems []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			problems = append(problems, "unexpected argument "+a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			problems = append(problems, "unknown flag "+a)
		}
		if !hasValue {
			i++ // every run flag takes a value
		}
	}
	return problems
}

// TestCommandLines checks the Deployment's args and the unit's ExecStart
// use only flags `cdcapply run` defines.
func TestCommandLines(t *testing.T) {
	flags := runFlags(t)
	unit, err := os.ReadFile("systemd/cdcapply.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/cdcapply (.*)$`).FindStringSubmatch(string(unit))
	if m == nil {
		t.Fatal("no ExecStart=/usr/local/bin/cdcapply line")
	}
	for _, p := range checkRunArgs(strings.Fields(m[1]), flags) {
		t.Error("systemd ExecStart: " + p)
	}
	for _, docs := range manifests(t) {
		for _, doc := range docs {
			if doc["kind"] != "Deployment" {
				continue
			}
			ctr := get(doc, "spec", "template", "spec", "containers").([]any)[0]
			for _, p := range checkRunArgs(toStrings(get(ctr, "args")), flags) {
				t.Error("Deployment args: " + p)
			}
		}
	}
	if got := checkRunArgs([]string{"run", "--config", "x"}, flags); len(got) == 0 {
		t.Error("checkRunArgs accepted an unknown flag")
	}
}
