package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// PrintTable prints the report as a table.
func PrintTable(rep *Report, w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if rep.Traced {
		fmt.Fprintf(tw, "\ntracing on: every span sampled; %d OTLP exports, %.1f MB\n", rep.TraceExports, float64(rep.TraceBytes)/1e6)
	}
	fmt.Fprintf(tw, "\nmeasure\tvalue\n")
	keys := func(m map[string]float64) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	for _, k := range keys(rep.Throughput) {
		fmt.Fprintf(tw, "%s\t%.0f /s\n", k, rep.Throughput[k])
	}
	for _, k := range keys(rep.LatencyMS) {
		fmt.Fprintf(tw, "%s\t%.2f ms\n", k, rep.LatencyMS[k])
	}
	for _, k := range keys(rep.Ratios) {
		fmt.Fprintf(tw, "%s\t%.2fx\n", k, rep.Ratios[k])
	}
	// The clients phase's runs, by client count and then the fixed rate.
	var loads []string
	for k := range rep.Throughput {
		if load, ok := strings.CutPrefix(k, "clients_defaults_"); ok {
			loads = append(loads, load)
		}
	}
	sort.Slice(loads, func(i, j int) bool {
		a, aerr := strconv.Atoi(loads[i])
		b, berr := strconv.Atoi(loads[j])
		if aerr != nil || berr != nil {
			return berr != nil && aerr == nil
		}
		return a < b
	})
	if len(loads) > 0 {
		fmt.Fprintf(tw, "\nclients phase\tdelivered/s\tp50 ms\tp99 ms\tCPU ms/delivery (PostgreSQL)\tpeak RSS MB\n")
		for _, load := range loads {
			name := load + " clients"
			if at, ok := strings.CutPrefix(load, "at"); ok {
				name = at + "/s"
			}
			for _, s := range Settings {
				k := "clients_" + s.Name + "_" + load
				if _, ok := rep.Throughput[k]; ok {
					fmt.Fprintf(tw, "%s, %s\t%.0f\t%.1f\t%.1f\t%.2f (%.2f)\t%d\n", s.Name, name, rep.Throughput[k], rep.LatencyMS[k+"_p50"],
						rep.LatencyMS[k+"_p99"], rep.CPUPerDelivery[k+"_total"], rep.CPUPerDelivery[k+"_postgres"], rep.Counts[k+"_peak_rss_mb"])
				}
			}
		}
	}
	printRoles(rep, tw)
	if r := rep.Retention; r != nil && len(r.Samples) > 0 {
		fmt.Fprintf(tw, "\nretention phase (keep %s, partitions %s, %d/s)\tat s\tschema MB\toutbox MB\tdeliveries hot\tarchive MB\tsegments\n", r.Keep, r.Partition, r.Rate)
		for i, s := range r.Samples {
			fmt.Fprintf(tw, "period %d\t%.0f\t%.2f\t%.2f\t%d\t%.2f\t%d\n", i+1, s.AtSeconds, float64(s.SchemaBytes)/1e6, float64(s.OutboxBytes)/1e6,
				s.HotDeliveries, float64(s.ArchiveBytes)/1e6, s.Segments)
		}
	}
	fmt.Fprintf(tw, "\ntarget\twant\tgot\tmet\n")
	for _, t := range rep.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%v\n", t.Name, t.Want, t.Got, t.Passed)
	}
	tw.Flush()
	if rep.Void {
		fmt.Fprintf(w, "\nVOID: %s\n", rep.VoidReason)
	}
}

// WriteReport writes the JSON report to out (if set) and a timestamped JSON report and SVG
// latency chart to dir.
func WriteReport(rep *Report, out, dir string) ([]string, error) {
	body, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	var written []string
	if out != "" {
		// `make bench` writes bench/results/latest.json, a directory a fresh clone lacks.
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(out, append(body, '\n'), 0o644); err != nil {
			return nil, err
		}
		written = append(written, out)
	}
	if dir == "" {
		return written, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return written, err
	}
	stamp := rep.StartedAt.Format("20060102-150405")
	jsonPath := filepath.Join(dir, "bench-"+stamp+".json")
	if err := os.WriteFile(jsonPath, append(body, '\n'), 0o644); err != nil {
		return written, err
	}
	svgPath := filepath.Join(dir, "bench-"+stamp+".svg")
	if err := os.WriteFile(svgPath, []byte(latencySVG(rep)), 0o644); err != nil {
		return written, err
	}
	return append(written, jsonPath, svgPath), nil
}

// latencySVG draws each latency distribution as a CDF on a logarithmic time axis.
func latencySVG(rep *Report) string {
	const w, h, left, bottom, top, right = 760, 420, 60, 50, 30, 200
	minMS, maxMS := 0.1, 1000.0
	x := func(ms float64) float64 {
		ms = math.Min(math.Max(ms, minMS), maxMS)
		return left + (math.Log10(ms)-math.Log10(minMS))/(math.Log10(maxMS)-math.Log10(minMS))*(w-left-right)
	}
	y := func(q float64) float64 { return top + (1-q)*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13">ledger bench %s: latency distributions (CDF)</text>`, left, rep.StartedAt.Format(time.RFC3339))
	for _, ms := range []float64{0.1, 1, 5, 10, 50, 100, 1000} {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%g ms</text>`,
			x(ms), top, x(ms), h-bottom, x(ms), h-bottom+15, ms)
	}
	for _, q := range []float64{0, .5, .9, .99, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">p%g</text>`,
			left, y(q), w-right, y(q), left-5, y(q)+4, q*100)
	}
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"}
	var names []string
	for k := range rep.Samples {
		names = append(names, k)
	}
	sort.Strings(names)
	for i, name := range names {
		s := rep.Samples[name]
		if len(s) == 0 {
			continue
		}
		var pts []string
		step := max(1, len(s)/400)
		for j := 0; j < len(s); j += step {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s[j]), y(float64(j+1)/float64(len(s)))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s[len(s)-1]), y(1)))
		c := colors[i%len(colors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, c, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s (p99 %.1f ms)</text>`,
			w-right+10, top+i*18, c, w-right+25, top+i*18+9, name, percentile(s, .99))
	}
	b.WriteString(`</svg>`)
	return b.String()
}
