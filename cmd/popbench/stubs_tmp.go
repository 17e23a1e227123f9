package main

import "github.com/urfave/cli/v2"

func faultsCommand() *cli.Command   { return &cli.Command{Name: "faults"} }
func popsCommand() *cli.Command     { return &cli.Command{Name: "pops"} }
func centralCommand() *cli.Command  { return &cli.Command{Name: "central"} }
