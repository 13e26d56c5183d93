// Command promcheck checks Prometheus text exposition (format 0.0.4, what
// the kubelet serves on /metrics, /metrics/resource, /metrics/cadvisor and
// /metrics/probes) with Prometheus' own parser: the text parser of
// github.com/prometheus/common/expfmt (the version in go.mod).
//
//	promcheck FILE|- ...
//
// Each input (`-` is stdin) is parsed whole, then every sample line is
// parsed again on its own by the same parser (an untyped family of one
// series: its metric name and full label set, `le` and `quantile`
// included), because the parser folds a histogram's or summary's lines into
// one metric and keeps the last of two `_sum` lines without a word. An input
// fails when:
//
//   - the parser returns an error (syntax, a second HELP or TYPE line, a
//     TYPE line after the family's samples, an invalid name or value, ...);
//   - a series (metric name and full label set) is on two sample lines;
//   - a sample of a family typed counter is negative;
//   - a family typed histogram has a NAME_bucket sample without `le`.
//
// A family without a type (no TYPE line, or TYPE untyped) is reported on
// stderr but does not fail the input. Problems go to stderr, one line each,
// `FILE: ...` or `FILE:LINE: ...` (at most 20 per input); a passing input
// prints `FILE: N families, M series` on stdout (N families as the parser
// returns them, M sample lines).
//
// Exit codes: 0 every input passed, 1 an input failed or could not be read,
// 2 usage.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const usage = `usage: promcheck FILE|- ...`

// maxReports caps the problem (and, separately, warning) lines per input.
const maxReports = 20

func main() {
	flag.Usage = func() { fmt.Fprintln(os.Stderr, usage) }
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	stdin := 0
	for _, a := range args {
		if a == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		fmt.Fprintln(os.Stderr, "promcheck: `-` (stdin) given more than once")
		os.Exit(2)
	}
	code := 0
	for _, a := range args {
		name, data, err := read(a)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			code = 1
			continue
		}
		r := check(data)
		report(name, "warning: ", r.warnings)
		if len(r.problems) > 0 {
			report(name, "", r.problems)
			code = 1
			continue
		}
		fmt.Printf("%s: %d families, %d series\n", name, r.families, r.series)
	}
	os.Exit(code)
}

func read(arg string) (string, []byte, error) {
	if arg == "-" {
		data, err := io.ReadAll(os.Stdin)
		return "stdin", data, err
	}
	data, err := os.ReadFile(arg)
	return arg, data, err
}

// report prints each note as "NAME: PREFIXnote" or, with a line number,
// "NAME:LINE: PREFIXnote", at most maxReports of them.
func report(name, prefix string, notes []note) {
	for i, n := range notes {
		if i == maxReports {
			fmt.Fprintf(os.Stderr, "%s: %s... and %d more\n", name, prefix, len(notes)-i)
			return
		}
		if n.line > 0 {
			fmt.Fprintf(os.Stderr, "%s:%d: %s%s\n", name, n.line, prefix, n.msg)
		} else {
			fmt.Fprintf(os.Stderr, "%s: %s%s\n", name, prefix, n.msg)
		}
	}
}

// note is a problem or warning, on line (1-based) or on the whole input (0).
type note struct {
	line int
	msg  string
}

type result struct {
	families, series   int
	problems, warnings []note
}

func check(data []byte) result {
	var r result
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		r.problems = append(r.problems, note{0, err.Error()})
		return r
	}
	r.families = len(families)
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if families[n].GetType() == dto.MetricType_UNTYPED {
			r.warnings = append(r.warnings, note{0, fmt.Sprintf("family %s has no type (no TYPE line, or TYPE untyped)", n)})
		}
	}

	seen := map[string]int{} // series key -> line
	for i, line := range strings.Split(string(data), "\n") {
		lineNo := i + 1
		t := strings.TrimLeft(line, " \t")
		if t == "" || t[0] == '#' {
			continue
		}
		r.series++
		one, err := parser.TextToMetricFamilies(strings.NewReader(line + "\n"))
		if err != nil || len(one) != 1 {
			r.problems = append(r.problems, note{lineNo, fmt.Sprintf("the sample line alone does not parse as one series: %v", err)})
			continue
		}
		var name string
		var m *dto.Metric
		for n, mf := range one {
			name = n
			if len(mf.GetMetric()) != 1 {
				break
			}
			m = mf.GetMetric()[0]
		}
		if m == nil {
			r.problems = append(r.problems, note{lineNo, "the sample line alone does not parse as one series"})
			continue
		}
		series := format(name, m.GetLabel())
		k := key(name, m.GetLabel())
		if first, dup := seen[k]; dup {
			r.problems = append(r.problems, note{lineNo, fmt.Sprintf("duplicate series %s (first on line %d)", series, first)})
		} else {
			seen[k] = lineNo
		}
		fam, typ := family(families, name)
		switch {
		case typ == dto.MetricType_COUNTER && name == fam && m.GetUntyped().GetValue() < 0:
			r.problems = append(r.problems, note{lineNo, fmt.Sprintf("counter %s is negative: %s", series,
				strconv.FormatFloat(m.GetUntyped().GetValue(), 'g', -1, 64))})
		case (typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_GAUGE_HISTOGRAM) &&
			name == fam+"_bucket" && !hasLabel(m.GetLabel(), model.BucketLabel):
			r.problems = append(r.problems, note{lineNo, fmt.Sprintf("histogram %s: bucket %s has no le label", fam, series)})
		}
	}
	return r
}

// family finds the family a sample named name belongs to, as the parser
// does (setOrCreateCurrentMF): its own name first, then a summary's or
// histogram's _sum/_count (and a histogram's _bucket).
func family(families map[string]*dto.MetricFamily, name string) (string, dto.MetricType) {
	if mf, ok := families[name]; ok {
		return name, mf.GetType()
	}
	for _, suffix := range []string{"_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if mf, ok := families[base]; ok && mf.GetType() == dto.MetricType_SUMMARY {
				return base, mf.GetType()
			}
		}
	}
	for _, suffix := range []string{"_count", "_sum", "_bucket"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if mf, ok := families[base]; ok &&
				(mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_GAUGE_HISTOGRAM) {
				return base, mf.GetType()
			}
		}
	}
	return name, dto.MetricType_UNTYPED
}

func hasLabel(labels []*dto.LabelPair, name string) bool {
	for _, l := range labels {
		if l.GetName() == name {
			return true
		}
	}
	return false
}

// key identifies a series: the name and the label pairs, sorted.
func key(name string, labels []*dto.LabelPair) string {
	pairs := make([]string, len(labels))
	for i, l := range labels {
		pairs[i] = l.GetName() + "\xfe" + l.GetValue()
	}
	sort.Strings(pairs)
	return name + "\xff" + strings.Join(pairs, "\xff")
}

// format prints a series as name{label="value",...}, labels as written.
func format(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteByte('=')
		b.WriteString(strconv.Quote(l.GetValue()))
	}
	b.WriteByte('}')
	return b.String()
}
