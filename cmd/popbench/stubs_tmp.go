package main

import "github.com/urfave/cli/v2"

func loadCommand() *cli.Command     { return &cli.Command{Name: "load"} }
func accuracyCommand() *cli.Command { return &cli.Command{Name: "accuracy"} }
func faultsCommand() *cli.Command   { return &cli.Command{Name: "faults"} }
func popsCommand() *cli.Command     { return &cli.Command{Name: "pops"} }
func centralCommand() *cli.Command  { return &cli.Command{Name: "central"} }
