package bench

import (
	"fmt"
	"image/color"
	"math"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Charts are written as PNG or SVG, chosen by the file extension.

const chartW, chartH = 8 * vg.Inch, 4 * vg.Inch

// ChartExt returns the file extension for a chart format: ".svg" for
// "svg", ".png" otherwise (the default).
func ChartExt(format string) string {
	if format == "svg" {
		return ".svg"
	}
	return ".png"
}

// ClientSeries is one client's admitted rate over time, for
// ChartAdmitted.
type clientSeries struct {
	Label string
	Limit float64   // per second
	Rate  []float64 // admitted per second, one value per bucket
}

// AdmittedSeries returns the admitted rate per bucket of each chosen client.
func admittedSeries(r *Replay, clients []int, bucket time.Duration) []clientSeries {
	out := make([]clientSeries, 0, len(clients))
	for _, ci := range clients {
		c := r.Trace.Clients[ci]
		rt := r.Trace.Routes[c.Route]
		s := r.Series(bucket, func(id int32) bool { return int(id) == ci })
		cs := clientSeries{Label: fmt.Sprintf("%s (%.1f× offered)", c.ID, c.Multiple), Limit: rt.Rate()}
		for _, b := range s {
			cs.Rate = append(cs.Rate, float64(b[Admitted])/bucket.Seconds())
		}
		out = append(out, cs)
	}
	return out
}

// ChartAdmitted draws admitted rate vs limit over time per client.
func chartAdmitted(path string, series []clientSeries, bucket time.Duration) error {
	p := plot.New()
	p.Title.Text = "Admitted rate vs limit, per client"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "admitted requests/s"
	p.Legend.Top = true
	limits := map[float64]bool{}
	for i, s := range series {
		pts := make(plotter.XYs, len(s.Rate))
		for j, v := range s.Rate {
			pts[j] = plotter.XY{X: float64(j) * bucket.Seconds(), Y: v}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = clientColors[i%len(clientColors)], vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.Label, l)
		if !limits[s.Limit] && len(s.Rate) > 0 {
			limits[s.Limit] = true
			ll, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: s.Limit}, {X: float64(len(s.Rate)) * bucket.Seconds(), Y: s.Limit}})
			ll.Color = color.Gray{Y: 80}
			ll.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
			p.Add(ll)
			p.Legend.Add(fmt.Sprintf("limit %.0f/s", s.Limit), ll)
		}
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = intTicks{}, intTicks{}
	p.Y.Min = 0
	p.Y.Max = legendRoom(p.Y.Max, len(series)+len(limits))
	return p.Save(chartW, chartH, path)
}

// ChartCDF draws latency CDFs (log-scale milliseconds), one line per name.
func chartCDF(path, title string, names []string, lats []*Latency) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of requests ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Left, p.Legend.Top = true, true
	for i, lat := range lats {
		cdf := lat.CDF()
		if len(cdf) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(cdf))
		for j, c := range cdf {
			pts[j] = plotter.XY{X: max(0.001, float64(c.Value)/float64(time.Millisecond)), Y: c.Fraction}
		}
		if err := addLine(p, pts, i, 1.5, names[i]); err != nil {
			return err
		}
	}
	return p.Save(chartW, chartH, path)
}

// Span is a labelled interval of a timeline (a fault being active).
type Span struct {
	Label    string        `json:"label"`
	From, To time.Duration `json:"-"`
	// FromS, ToS mirror From and To in seconds for JSON.
	FromS float64 `json:"from_s"`
	ToS   float64 `json:"to_s"`
}

// ChartTimeline draws requests per second by outcome over time, with the
// spans marked as vertical lines.
func ChartTimeline(path, title string, series [][NumOutcomes]int64, bucket time.Duration, spans []Span) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "requests/s"
	p.Legend.Top = true
	top := 1.0
	for o := Outcome(0); o < NumOutcomes; o++ {
		pts := make(plotter.XYs, len(series))
		for i, b := range series {
			v := float64(b[o]) / bucket.Seconds()
			top = max(top, v)
			pts[i] = plotter.XY{X: float64(i) * bucket.Seconds(), Y: v}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = outcomeColors[o], vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(o.String(), l)
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = intTicks{}, intTicks{}
	p.Y.Min = 0
	p.Y.Max = legendRoom(top, int(NumOutcomes))
	for i, s := range spans {
		for j, at := range []time.Duration{s.From, s.To} {
			l, _ := plotter.NewLine(plotter.XYs{{X: at.Seconds(), Y: 0}, {X: at.Seconds(), Y: top}})
			l.Color = color.Gray{Y: 60}
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
			p.Add(l)
			if j == 0 {
				lbl, err := plotter.NewLabels(plotter.XYLabels{
					XYs: []plotter.XY{{X: at.Seconds(), Y: top * (0.95 - 0.07*float64(i%4))}}, Labels: []string{s.Label}})
				if err == nil {
					p.Add(lbl)
				}
			}
		}
	}
	return p.Save(chartW, chartH, path)
}

// addLine draws pts as the i-th series (plotutil's i-th colour, width in
// points) with a legend entry.
func addLine(p *plot.Plot, pts plotter.XYs, i int, width float64, label string) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(width)
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

// outcomeColors are the timeline's colours: admitted green, refused red,
// unavailable amber, failed grey.
var outcomeColors = [NumOutcomes]color.Color{
	Admitted:    color.RGBA{G: 150, A: 255},
	Rejected:    color.RGBA{R: 210, A: 255},
	Unavailable: color.RGBA{R: 230, G: 150, A: 255},
	Failed:      color.Gray{Y: 100},
}

// clientColors tell clients apart without green and red, which read as
// admitted and refused.
var clientColors = []color.Color{
	color.RGBA{R: 31, G: 90, B: 200, A: 255},
	color.RGBA{R: 130, G: 50, B: 170, A: 255},
	color.RGBA{R: 230, G: 140, B: 20, A: 255},
	color.RGBA{R: 20, G: 160, B: 170, A: 255},
	color.RGBA{R: 140, G: 90, B: 40, A: 255},
	color.RGBA{R: 200, G: 80, B: 170, A: 255},
}

// legendRoom is the top of a y axis whose data reach top and whose legend,
// drawn at the top, has rows entries: high enough that the legend sits
// above the data.
func legendRoom(top float64, rows int) float64 {
	free := 1 - 0.06*float64(rows) - 0.05
	return max(top, 1) / max(free, 0.3)
}

// intTicks marks whole numbers only, labelled without decimals, at a step
// of 1, 2 or 5 times a power of ten giving about six major ticks.
type intTicks struct{}

func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 1.0
	for (hi-lo)/step > 6 {
		if isPow10(step / 2) {
			step = step / 2 * 5
		} else {
			step *= 2
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 0, 64)})
	}
	return ticks
}

func isPow10(v float64) bool {
	l := math.Log10(v)
	return math.Abs(l-math.Round(l)) < 1e-9
}
