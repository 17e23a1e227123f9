package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Table is a small table rendered for terminals or Markdown.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
}

// Add appends a row; values are formatted with %v (floats with 3
// significant decimals).
func (t *Table) Add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		switch v := c.(type) {
		case float64:
			row[i] = formatFloat(v)
		case time.Duration:
			row[i] = v.Round(time.Millisecond).String()
		default:
			row[i] = fmt.Sprint(v)
		}
	}
	t.Rows = append(t.Rows, row)
}

func formatFloat(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000 || v <= -1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.01 || v <= -0.01:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.4f", v)
}

// Text writes the table aligned for a terminal.
func (t *Table) Text(w io.Writer) {
	if t.Title != "" {
		fmt.Fprintf(w, "\n%s\n", t.Title)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.Header, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	_ = tw.Flush()
}

// Markdown returns the table as GitHub Markdown.
func (t *Table) markdown() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.Header, " | ") + " |\n|")
	for range t.Header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// Report is one Markdown file with text, tables and charts.
type Report struct {
	Title string
	parts []string
}

// Para adds a paragraph.
func (r *Report) Para(format string, args ...any) {
	r.parts = append(r.parts, fmt.Sprintf(format, args...))
}

// Table adds a table with its title as a bold line.
func (r *Report) Table(t *Table) {
	s := t.markdown()
	if t.Title != "" {
		s = "**" + t.Title + "**\n\n" + s
	}
	r.parts = append(r.parts, s)
}

// Image links a chart (path relative to the report's directory).
func (r *Report) Image(alt, rel string) {
	r.parts = append(r.parts, fmt.Sprintf("![%s](%s)", alt, rel))
}

// Write writes the report to path, creating its directory.
func (r *Report) Write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	body := "# " + r.Title + "\n\n" + strings.Join(r.parts, "\n\n") + "\n"
	return os.WriteFile(path, []byte(body), 0o644)
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }

// Result is what a scenario's Run returns: a report that encodes to JSON as
// it is and shows itself as tables. A Result may also have
// WriteSummary(io.Writer), the lines to print after its tables, and
// ChartFiles() []string, the charts a saved report links (file names).
type Result interface {
	Tables() []*Table
}
