package accuracy

import (
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
)

// chartPrecision draws wrong decisions (%) against the sliding window's
// precision N, one line per trace, from accuracy rows without skew.
func chartPrecision(path string, rows []*accuracyResult) error {
	p := plot.New()
	p.Title.Text = "Sliding window: wrong decisions vs sub-windows N (exact sliding log as reference)"
	p.X.Label.Text = "precision N (sub-windows, log scale)"
	p.Y.Label.Text = "wrong decisions (%)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	var traces []string
	pts := map[string]plotter.XYs{}
	for _, r := range rows {
		if r.Algorithm != "sliding" || r.SkewMs != 0 || r.Precision < 1 {
			continue
		}
		if _, ok := pts[r.Trace]; !ok {
			traces = append(traces, r.Trace)
		}
		pts[r.Trace] = append(pts[r.Trace], plotter.XY{X: float64(r.Precision), Y: r.WrongPct})
	}
	for i, tr := range traces {
		l, s, err := plotter.NewLinePoints(pts[tr])
		if err != nil {
			return err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		p.Add(l, s)
		p.Legend.Add(tr, l, s)
	}
	return p.Save(chartW, chartH, path)
}

// ChartPrecision draws the report's wrong decisions against the sliding
// window's precision to path (PNG or SVG by extension).
func (r *report) ChartPrecision(path string) error { return chartPrecision(path, r.Rows) }
