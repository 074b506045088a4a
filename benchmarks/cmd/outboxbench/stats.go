package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime/pprof"
	"slices"
	"strings"
)

// figure is one measured quantity: one sample per run.
type figure struct {
	name    string // RESULT name suffix, no spaces
	label   string // table label
	unit    string
	samples []float64
	note    string
}

// section collects the figures of one section for one database, in display order.
type section struct {
	db      string
	key     string // RESULT name segment ("publish", "drain", ...)
	title   string
	figs    []*figure
	byName  map[string]*figure
	notes   []string
	failure error
}

func newSection(db, key, title string) *section {
	return &section{db: db, key: key, title: title, byName: map[string]*figure{}}
}

// add records one sample of figure name (created on first use, in call order).
func (s *section) add(name, label, unit string, v float64) {
	f := s.byName[name]
	if f == nil {
		f = &figure{name: name, label: label, unit: unit}
		s.byName[name] = f
		s.figs = append(s.figs, f)
	}
	f.samples = append(f.samples, v)
}

func (s *section) note(format string, args ...any) {
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	c := slices.Clone(v)
	slices.Sort(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// fmtNum prints a figure with precision that suits its size.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "n/a"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// print writes the section's markdown table and one RESULT line per figure (the
// median).
func (s *section) print(w io.Writer) {
	fmt.Fprintf(w, "\n### %s — %s\n\n", s.title, s.db)
	if s.failure != nil {
		fmt.Fprintf(w, "FAILED: %v\n", s.failure)
	}
	if len(s.figs) > 0 {
		fmt.Fprintln(w, "| figure | median | min–max | unit | runs |")
		fmt.Fprintln(w, "| --- | ---: | ---: | --- | ---: |")
		for _, f := range s.figs {
			lo, hi := slices.Min(f.samples), slices.Max(f.samples)
			fmt.Fprintf(w, "| %s | %s | %s–%s | %s | %d |\n", f.label, fmtNum(median(f.samples)), fmtNum(lo), fmtNum(hi), f.unit, len(f.samples))
		}
	}
	for _, n := range s.notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	fmt.Fprintln(w)
	for _, f := range s.figs {
		fmt.Fprintf(w, "RESULT %s/%s/%s %s %s\n", s.db, s.key, f.name, strings.ReplaceAll(fmtNumPlain(median(f.samples)), " ", ""), f.unit)
	}
}

func fmtNumPlain(v float64) string {
	if math.Abs(v) >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

// percentile returns the p-quantile (0..1) of sorted values (nearest rank).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// labeledStep is one contender's measurement, run under the pprof label "contender" so
// that -cpuprofile can tell the contenders apart (pprof -tagfocus contender=...): the
// goroutines it starts (the forwarder's, a publisher's client) carry the label too.
type labeledStep struct {
	name string
	fn   func() error
}

func (s labeledStep) run(ctx context.Context, prefix string) (err error) {
	pprof.Do(ctx, pprof.Labels("contender", prefix+"/"+s.name), func(context.Context) { err = s.fn() })
	return err
}
