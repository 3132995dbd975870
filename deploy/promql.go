package deploy

import (
	"fmt"
	"strings"
)

// MetricNames returns the metric names an expression selects, in order of
// first appearance. It is a small PromQL scanner, not a parser: it skips
// string literals, label matchers ({...}), ranges and subqueries ([...]),
// numbers and durations, Grafana variables ($x, ${x}, [[x]]), keywords and
// the label lists after by/without/on/ignoring/group_left/group_right, and
// treats an identifier followed by "(" as a function or aggregation, which
// must be one PromQL knows. Every other identifier is a metric selector.
// A selector by __name__ matcher is refused, since the name could not be
// checked.
func MetricNames(expr string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	s := expr
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // comment to end of line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, body, err := skipGroup(s, i, '{', '}')
			if err != nil {
				return nil, err
			}
			if strings.Contains(body, "__name__") {
				return nil, fmt.Errorf("selector %q matches __name__: name the metric instead", body)
			}
			i = j
		case c == '[':
			if strings.HasPrefix(s[i:], "[[") { // Grafana's old [[var]] form
				k := strings.Index(s[i:], "]]")
				if k < 0 {
					return nil, fmt.Errorf("unclosed [[ at %d in %q", i, expr)
				}
				i += k + 2
				continue
			}
			j, _, err := skipGroup(s, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				k := strings.IndexByte(s[i:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unclosed ${ at %d in %q", i, expr)
				}
				i += k + 1
				continue
			}
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			// a number (0.99, 1e3, 0x1f) or a duration (5m, 1h30m)
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.' ||
				(s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E')) {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			id := s[i:j]
			i = j
			k := skipSpace(s, i)
			lower := strings.ToLower(id)
			switch {
			case labelListKeywords[lower]:
				// by (a, b) / on (a) / group_left (a) ...: a label list, if any.
				if k < len(s) && s[k] == '(' {
					end, _, err := skipGroup(s, k, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case keywords[lower]:
			case aggregations[id]:
				// sum (x), sum by (l) (x), sum(x) without (l): the operand follows.
			case k < len(s) && s[k] == '(':
				if !functions[id] {
					return nil, fmt.Errorf("unknown PromQL function %q in %q", id, expr)
				}
			default:
				if !seen[id] {
					seen[id] = true
					names = append(names, id)
				}
			}
		default:
			i++ // operators, parentheses, commas, @
		}
	}
	return names, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed string at %d in %q", i, s)
}

// skipGroup returns the index after the group opened at i and its body,
// skipping strings inside it and counting nested groups of the same kind.
func skipGroup(s string, i int, open, close byte) (int, string, error) {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			k, err := skipString(s, j)
			if err != nil {
				return 0, "", err
			}
			j = k - 1
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j + 1, s[i+1 : j], nil
			}
		}
	}
	return 0, "", fmt.Errorf("unclosed %c at %d in %q", open, i, s)
}

var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "start": true, "end": true,
}

var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// functions are PromQL's functions (Prometheus 3.x).
var functions = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`abs absent absent_over_time avg_over_time ceil changes clamp clamp_max
		clamp_min count_over_time day_of_month day_of_week day_of_year days_in_month delta deriv
		double_exponential_smoothing exp first_over_time floor histogram_avg histogram_count
		histogram_fraction histogram_quantile histogram_stddev histogram_stdvar histogram_sum hour
		idelta increase info irate label_join label_replace last_over_time ln log10 log2
		mad_over_time max_over_time min_over_time minute month predict_linear present_over_time
		quantile_over_time rate resets round scalar sgn sort sort_by_label sort_by_label_desc
		sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time time timestamp vector year
		acos acosh asin asinh atan atanh cos cosh deg pi rad sin sinh tan tanh`) {
		functions[f] = true
	}
}
