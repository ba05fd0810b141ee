package runner

import (
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/leakcheck"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m.Run)) }
