package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHelpPrintsEachCommandsUsageAndFlagsAndExitsZero(t *testing.T) {
	own := map[string][]string{
		"check":   {"-fail-on", "-max-lag", "-prefix"},
		"list":    {"-prefix", "-lease", "-scan", "-limit", "-done"},
		"key":     {"-payload", "-topic", "-message-id", "-metadata", "-job-id", "-prefix", "-plain"},
		"inspect": {"-prefix", "-plain"},
		"release": {"-force", "-watch", "-lease", "-prefix", "-plain"},
		"forget":  {"-yes", "-prefix", "-plain"},
	}
	for name, flags := range own {
		aFlag := []string{"-redis", "redis://127.0.0.1:1/0"}
		if name == "key" {
			aFlag = []string{"-payload", "job.json"}
		}
		for _, args := range [][]string{{"help", name}, {name, "-h"}, {"-h", name}, {name, "job-1", "--help"}, append(append([]string{name}, aFlag...), "-help")} {
			r := runCLI(t, nil, nil, args...)
			require.Zero(t, r.status, "%q: %s", args, r)
			require.Empty(t, r.stderr, "%q", args)
			require.Contains(t, r.stdout, "usage: jobonce [flags] "+name, "%q", args)
			storeFlags := []string{"-redis", "-postgres", "-schema", "-table"}
			if name == "key" { // it reads no store
				for _, f := range storeFlags {
					require.NotContains(t, r.stdout, "  "+f+" ", "%q: %s", args, r)
				}
				storeFlags = nil
			} else {
				require.Contains(t, r.stdout, "$DATABASE_URL", "%q", args)
			}
			for _, f := range append(flags, storeFlags...) {
				require.Contains(t, r.stdout, "  "+f, "%q: %s", args, r)
			}
			for other, otherFlags := range own {
				if other == name {
					continue
				}
				for _, f := range otherFlags {
					if !slices.Contains(flags, f) {
						require.NotContains(t, r.stdout, "  "+f+" ", "%q: only %s's flags: %s", args, name, r)
					}
				}
			}
		}
	}
}

func TestHelpAndDashHPrintTheOverviewAndExitZero(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "help"}, {"-redis", "redis://127.0.0.1:6379/0", "-h"}} {
		r := runCLI(t, nil, nil, args...)
		require.Zero(t, r.status, "%q: %s", args, r)
		require.Empty(t, r.stderr, "%q", args)
		for _, want := range []string{"usage: jobonce [flags] COMMAND [ARGUMENTS]", "  check ", "  list ", "  key ADAPTER NAME ", "  inspect KEY ", "  release KEY ", "  forget KEY ", "  help [COMMAND] ", "-postgres", "Exit status"} {
			require.Contains(t, r.stdout, want, "%q: %s", args, r)
		}
	}
}

func TestNoCommandPrintsTheOverviewAndExitsOne(t *testing.T) {
	for _, args := range [][]string{nil, {"-prefix", "app:"}} {
		r := runCLI(t, nil, nil, args...)
		requireOneErrorLine(t, r, "jobonce: no command: give one of check, list, key, inspect, release, forget or help")
		require.Contains(t, r.stdout, "usage: jobonce [flags] COMMAND [ARGUMENTS]", "%s", r)
	}
}

func TestAnUnknownCommandIsNamedWithAPointerToHelp(t *testing.T) {
	r := runCLI(t, nil, nil, "inspekt", "job-1")
	requireOneErrorLine(t, r, `jobonce: unknown command "inspekt": jobonce help lists the commands`)
	require.Empty(t, r.stdout)

	r = runCLI(t, nil, nil, "help", "inspekt")
	requireOneErrorLine(t, r, `jobonce: help: unknown command "inspekt": the commands are check, list, key, inspect, release, forget or help`)
}

func TestAFlagOfAnotherCommandIsRefusedNamingItsCommand(t *testing.T) {
	r := runCLI(t, nil, nil, "check", "-force")
	requireOneErrorLine(t, r, "jobonce: flag provided but not defined: -force (a flag of release, not of check)")
	require.Contains(t, r.stdout, "usage: jobonce [flags] check", "%s", r)

	r = runCLI(t, nil, nil, "inspect", "job-1", "-prefix", "app:", "-lease", "1m")
	requireOneErrorLine(t, r, "-lease (a flag of list and release, not of inspect)")

	r = runCLI(t, nil, nil, "check", "-plain")
	requireOneErrorLine(t, r, "-plain (a flag of key, inspect, release and forget, not of check)")
}

func TestAWrongNumberOfArgumentsNamesWhatTheCommandTakes(t *testing.T) {
	r := runCLI(t, nil, nil, "inspect")
	requireOneErrorLine(t, r, "jobonce: inspect takes one KEY, got 0 arguments: jobonce help inspect prints its usage")
	require.Contains(t, r.stdout, "usage: jobonce [flags] inspect KEY")

	r = runCLI(t, nil, nil, "check", "job-1")
	requireOneErrorLine(t, r, "jobonce: check takes no argument, got 1 arguments")
}
