package apply

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readiness tracks what /readyz reports: the instance joined its group
// and every partition it was assigned has been positioned from its table.
// Until then it may still seek, and a rollout must not count it as up.
type readiness struct {
	mu         sync.Mutex // guards the fields below
	joined     bool
	unassigned map[string]map[int32]bool // assigned, not yet positioned
}

func (r *readiness) assigned(parts map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.joined = true
	if r.unassigned == nil {
		r.unassigned = map[string]map[int32]bool{}
	}
	for topic, ps := range parts {
		for _, p := range ps {
			if r.unassigned[topic] == nil {
				r.unassigned[topic] = map[int32]bool{}
			}
			r.unassigned[topic][p] = true
		}
	}
}

func (r *readiness) positioned(topic string, p int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.unassigned[topic], p)
}

func (r *readiness) revoked(parts map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			delete(r.unassigned[topic], p)
		}
	}
}

// pending returns why the instance is not ready ("" when it is).
func (r *readiness) pending() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.joined {
		return "no partition assignment yet"
	}
	var waiting []string
	for topic, ps := range r.unassigned {
		for p := range ps {
			waiting = append(waiting, fmt.Sprintf("%s/%d", topic, p))
		}
	}
	if len(waiting) == 0 {
		return ""
	}
	sort.Strings(waiting)
	return "positions not restored yet: " + strings.Join(waiting, ", ")
}

// Ready reports whether the engine has its assignment and has positioned
// every assigned partition from its table; when not, the reason.
func (e *Engine) Ready() (bool, string) {
	why := e.ready.pending()
	return why == "", why
}

// Handler serves /metrics from g, /healthz (the process answers),
// /readyz (Engine.Ready) and, with pprof, /debug/pprof/.
func (e *Engine) Handler(g prometheus.Gatherer, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := e.Ready(); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
