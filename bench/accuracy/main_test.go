package accuracy

import (
	"os"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }
