package main

import (
	"testing"

	"github.com/urfave/cli/v2"
)

// TestEveryFlagHasUsage: `popbench <command> --help` explains every flag
// (a flag without usage text shows only its name and default).
func TestEveryFlagHasUsage(t *testing.T) {
	for _, cmd := range commands() {
		for _, f := range cmd.Flags {
			df, ok := f.(cli.DocGenerationFlag)
			if !ok {
				t.Errorf("%s --%s: flag type %T has no usage text", cmd.Name, f.Names()[0], f)
				continue
			}
			if df.GetUsage() == "" {
				t.Errorf("%s --%s: no usage text", cmd.Name, f.Names()[0])
			}
		}
	}
}
