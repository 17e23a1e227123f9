package main

import "github.com/urfave/cli/v2"

func popsCommand() *cli.Command     { return &cli.Command{Name: "pops"} }
func centralCommand() *cli.Command  { return &cli.Command{Name: "central"} }
