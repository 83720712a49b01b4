package main

import (
	"flag"
	"strings"
)

// flagsFirst returns args with the flags of fs moved before the other
// arguments, which follow a "--", so fs.Parse reads a flag wherever it stands:
// before the command, between it and KEY, or after KEY. A flag that takes a
// value keeps the argument after it (unless written -name=value); an
// argument after "--" is never a flag. An unknown flag stays a flag, for
// fs.Parse to name.
func flagsFirst(fs *flag.FlagSet, args []string) []string {
	flags, rest := splitArgs(fs, args)
	return append(append(flags, "--"), rest...)
}

// splitArgs returns the flags of args (with their values) and the other
// arguments, as flagsFirst reads them.
func splitArgs(fs *flag.FlagSet, args []string) (flags, rest []string) {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			rest = append(rest, arg)
			continue
		}
		flags = append(flags, arg)
		name := strings.TrimPrefix(arg[1:], "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, rest
}

// isBoolFlag reports whether f takes no value, as flag.FlagSet decides it.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// commandName returns the command args name: their first argument that is
// neither a flag of any command nor a flag's value; "" when there is none.
func commandName(args []string) string {
	_, rest := splitArgs(everyFlag(new(options)), args)
	if len(rest) == 0 {
		return ""
	}
	return rest[0]
}
