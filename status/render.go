package status

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as one indented JSON document; the field
// names are part of the command's interface for scripts.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

// WriteText writes the report for a person: a summary line per table,
// then each table's details with aligned columns.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "status at %s; brokers %s", stamp(r.At), r.Brokers)
	if r.BrokerError != "" {
		fmt.Fprintf(&b, " (%s)", r.BrokerError)
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSTATE\tVERSION\tLAG\tFRESHNESS\tLIVE\tTOMBSTONES")
	for _, t := range r.Tables {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\n", t.Name, t.State, t.Version, lagText(t), freshText(t), t.Rows.Live, t.Rows.Tombstones)
	}
	tw.Flush()
	for _, t := range r.Tables {
		b.WriteString("\n")
		writeTable(&b, t)
	}
	if r.Group != nil {
		b.WriteString("\n")
		writeGroup(&b, r.Group)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

func writeTable(b *strings.Builder, t Table) {
	fmt.Fprintf(b, "table %s (%s)\n", t.Name, t.Location)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "  state\t%s\n", t.State)
	if t.Error != "" {
		fmt.Fprintf(tw, "  error\t%s\n", t.Error)
		return
	}
	if h := t.Halt; h != nil {
		label, class := "halted", ""
		if !h.Current {
			label = "last halt"
		}
		if h.Class != "" {
			class = " (" + h.Class + ")"
		}
		fmt.Fprintf(tw, "  %s\tat %s, version %d%s: %s\n", label, stamp(h.At), h.Version, class, h.Reason)
		switch {
		case h.Current:
		case t.Version > h.Version:
			fmt.Fprintf(tw, "  \tthe table committed again since (version %d)\n", t.Version)
		case h.Resumed != nil:
			fmt.Fprintf(tw, "  \tan engine resumed the table at %s (no commit since)\n", stamp(*h.Resumed))
		}
	}
	fmt.Fprintf(tw, "  version\t%d\n", t.Version)
	if c := t.LastCommit; c != nil {
		fmt.Fprintf(tw, "  last commit\t%s\n", commitText(c))
	}
	switch c := t.LastStreamCommit; {
	case c == nil:
		fmt.Fprintf(tw, "  last stream commit\tnone among versions %d..%d\n", t.TimeTravel.From, t.TimeTravel.To)
	case t.LastCommit == nil || c.Version != t.LastCommit.Version:
		fmt.Fprintf(tw, "  last stream commit\t%s\n", commitText(c))
	}
	fmt.Fprintf(tw, "  freshness\t%s\n", freshText(t))
	if f := t.Freshness; f != nil {
		fmt.Fprintf(tw, "  newest source ts\t%s\n", stamp(f.NewestSourceTs))
	}
	eligible := ""
	if t.Rows.PurgeEligible >= 0 {
		eligible = fmt.Sprintf(", %d past max lateness", t.Rows.PurgeEligible)
	}
	fmt.Fprintf(tw, "  rows\t%d live, %d tombstones%s (%d rows in %d files, read from the files)\n", t.Rows.Live, t.Rows.Tombstones, eligible, t.Rows.Total, t.Rows.Files)
	if h := t.Horizon; h != nil {
		fmt.Fprintf(tw, "  purge horizon\t%s (purged at %s, %d rows so far)\n", stamp(h.SourceTs), stamp(h.PurgedAt), h.PurgedRows)
	} else {
		fmt.Fprintf(tw, "  purge horizon\tnone (never purged)\n")
	}
	fmt.Fprintf(tw, "  log\t%s\n", logText(t.Log))
	if t.Log.CheckpointsBehind {
		fmt.Fprintf(tw, "  \tcheckpoints behind: more than %d intervals of commits since the last; see `log checkpoint failed` in the engine's log, cdcapply_checkpoint_failures_total and cdcapply_stage_in_progress_seconds{stage=\"checkpoint\"}\n", checkpointsBehindIntervals)
	}
	for _, tp := range t.Topics {
		if tp.Recreated {
			fmt.Fprintf(tw, "  topic recreated\t%s: the cluster's topic ID is %s, the table's positions were read from %s; its offsets are not the table's (lag unknown), and an engine halts the table (topic_recreated): rebuild it from the new topic\n", tp.Name, tp.Cluster, tp.Recorded)
		}
	}
	for _, c := range t.Compacted {
		switch {
		case c.DeletesLost:
			fmt.Fprintf(tw, "  compacted topic\t%s (cleanup.policy=%s) and the table skips Kafka tombstones: a delete whose change event the log cleaner removed reached it as a tombstone alone, and the row stayed live; set kafka_tombstones: delete, and re-snapshot the source to repair rows already kept\n", c.Topic, c.CleanupPolicy)
		case t.KafkaTombstones == "delete":
			fmt.Fprintf(tw, "  compacted topic\t%s (cleanup.policy=%s): Kafka tombstones delete rows (kafka_tombstones: delete)\n", c.Topic, c.CleanupPolicy)
		default:
			fmt.Fprintf(tw, "  compacted topic\t%s (cleanup.policy=%s): under kafka_tombstones: skip (the default) deletes the log cleaner reduced to tombstones are lost\n", c.Topic, c.CleanupPolicy)
		}
	}
	fmt.Fprintf(tw, "  time travel\t%s\n", travelText(t.TimeTravel))
	for _, u := range t.TimeTravel.Unreadable {
		fmt.Fprintf(tw, "  \tversion %d not readable: %s\n", u.Version, u.Reason)
	}
	tw.Flush()
	if len(t.Partitions) == 0 {
		fmt.Fprintf(b, "  no Kafka positions\n")
		return
	}
	pw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(pw, "  PIPELINE\tTOPIC\tPARTITION\tNEXT OFFSET\tHIGH WATERMARK\tLAG")
	for _, p := range t.Partitions {
		next := fmt.Sprint(p.Next)
		if !p.HasPosition {
			next = "none"
		}
		hw, lag := "?", "unknown"
		if p.HighWatermark != nil {
			hw, lag = fmt.Sprint(*p.HighWatermark), fmt.Sprint(*p.Lag)
		}
		fmt.Fprintf(pw, "  %s\t%s\t%d\t%s\t%s\t%s\n", p.Pipeline, p.Topic, p.Partition, next, hw, lag)
	}
	pw.Flush()
	for _, p := range t.Partitions {
		if p.Gone > 0 {
			fmt.Fprintf(b, "  offset gap: %s/%d: offsets %d..%d were deleted by retention before they were applied (%d records); an engine halts the table on them (offset_gap) unless on_offset_gap is skip\n",
				p.Topic, p.Partition, p.Next, p.Next+p.Gone-1, p.Gone)
		}
	}
}

// writeGroup writes the consumer group: each member and what it reads,
// and the tables' partitions nobody reads.
func writeGroup(b *strings.Builder, g *Group) {
	if g.Error != "" {
		fmt.Fprintf(b, "consumer group %s: unknown (%s)\n", g.Name, g.Error)
		return
	}
	members := fmt.Sprintf("%d members", len(g.Members))
	if len(g.Members) == 1 {
		members = "1 member"
	}
	if g.Protocol != "" {
		members += ", assigned by " + g.Protocol
	}
	fmt.Fprintf(b, "consumer group %s: %s, %s\n", g.Name, g.State, members)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	inflow := slices.ContainsFunc(g.Members, func(m Member) bool { return len(m.Inflow) > 0 })
	if len(g.Members) > 0 {
		head := "  INSTANCE\tCLIENT\tHOST\tPARTITIONS"
		if inflow {
			head += "\tINFLOW MEASURED"
		}
		fmt.Fprintln(tw, head)
	}
	for _, m := range g.Members {
		id := m.InstanceID
		if id == "" {
			id = "(dynamic)"
		}
		row := fmt.Sprintf("  %s\t%s\t%s\t%s", id, m.ClientID, m.Host, partitionsText(m.Partitions))
		if inflow {
			row += "\t" + inflowText(m.Inflow)
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	for _, sp := range g.Split {
		fmt.Fprintf(b, "  table %s is read by %d members (%s): each writes it, and their commits conflict on the files both change; kafka.assignment: tables keeps a table on one member\n",
			sp.Table, len(sp.Members), strings.Join(sp.Members, ", "))
	}
	if len(g.Unassigned) > 0 {
		fmt.Fprintf(b, "  unassigned: %s (no member reads them: nothing applies them until the group assigns them)\n", partitionsText(g.Unassigned))
	}
}

// inflowText writes a member's measured inflow by table, in table order:
// "customers 30/s, orders 1200/s" ("-" for none).
func inflowText(inflow map[string]float64) string {
	if len(inflow) == 0 {
		return "-"
	}
	var out []string
	for _, table := range slices.Sorted(maps.Keys(inflow)) {
		out = append(out, fmt.Sprintf("%s %s/s", table, strconv.FormatFloat(inflow[table], 'f', -1, 64)))
	}
	return strings.Join(out, ", ")
}

// partitionsText writes "topic/partition" lists compactly, a topic's
// consecutive partitions as a range: "orders/0-3,5 customers/0". The list
// is in order, a topic's partitions ascending.
func partitionsText(tps []string) string {
	if len(tps) == 0 {
		return "-"
	}
	var out []string
	var topic string
	var parts []string
	from, to := -1, -1
	flushRange := func() {
		if from < 0 {
			return
		}
		if from == to {
			parts = append(parts, fmt.Sprint(from))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", from, to))
		}
		from, to = -1, -1
	}
	flushTopic := func() {
		flushRange()
		if len(parts) > 0 {
			out = append(out, topic+"/"+strings.Join(parts, ","))
		}
		parts = nil
	}
	for _, tp := range tps {
		i := strings.LastIndexByte(tp, '/')
		t := tp[:i]
		var p int
		fmt.Sscan(tp[i+1:], &p)
		if t != topic {
			flushTopic()
			topic = t
		}
		if from >= 0 && p == to+1 {
			to = p
			continue
		}
		flushRange()
		from, to = p, p
	}
	flushTopic()
	return strings.Join(out, " ")
}

func logText(l Log) string {
	where := fmt.Sprintf("no checkpoint, %d commits to replay", l.CommitsAfter)
	if l.CheckpointVersion != nil {
		where = fmt.Sprintf("checkpoint at version %d, %d commits after it", *l.CheckpointVersion, l.CommitsAfter)
	}
	return fmt.Sprintf("%s (one every %d versions); %d live files, %d removed files kept until the retention expires them", where, l.CheckpointInterval, l.LiveFiles, l.RemovedFiles)
}

func commitText(c *Commit) string {
	if c.Time.IsZero() {
		return fmt.Sprintf("version %d (commit file cleaned up)", c.Version)
	}
	line := fmt.Sprintf("version %d at %s, %s", c.Version, stamp(c.Time), c.Operation)
	if c.RecordsRead >= 0 {
		line += fmt.Sprintf(", %d records read", c.RecordsRead)
	}
	return line
}

func lagText(t Table) string {
	switch {
	case t.State == "unreadable":
		return "-"
	case !t.LagKnown:
		return "unknown"
	}
	behind := 0
	for _, p := range t.Partitions {
		if p.Lag != nil && *p.Lag > 0 {
			behind++
		}
	}
	if behind == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%d of %d partitions behind)", t.TotalLag, behind, len(t.Partitions))
}

func freshText(t Table) string {
	if t.Freshness == nil {
		return "-"
	}
	return (time.Duration(t.Freshness.Seconds * float64(time.Second))).Round(time.Second).String()
}

func travelText(tt TimeTravel) string {
	if len(tt.Readable) == 0 {
		return fmt.Sprintf("no readable version among %d..%d", tt.From, tt.To)
	}
	parts := make([]string, len(tt.Readable))
	for i, r := range tt.Readable {
		if r.From == r.To {
			parts[i] = fmt.Sprint(r.From)
		} else {
			parts[i] = fmt.Sprintf("%d..%d", r.From, r.To)
		}
	}
	return fmt.Sprintf("readable versions %s (checked %d..%d)", strings.Join(parts, ", "), tt.From, tt.To)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
