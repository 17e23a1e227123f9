package accuracy

import (
	"os"
	"path/filepath"
	"testing"
)

func TestChartPrecision(t *testing.T) {
	prec := filepath.Join(t.TempDir(), "precision.png")
	if err := chartPrecision(prec, []*accuracyResult{{Algorithm: "sliding", Trace: "near", Precision: 1, WrongPct: 3},
		{Algorithm: "sliding", Trace: "near", Precision: 12, WrongPct: 1}}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(prec); err != nil || st.Size() < 500 {
		t.Errorf("%s: %v", prec, err)
	}
}
