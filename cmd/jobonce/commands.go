package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// options holds the flags of every command; a command's flag set fills in
// the store's, the key's (check: -prefix alone) and its own.
type options struct {
	redisURL, postgresURL string
	schema, table         string
	prefix                string
	plain                 bool
	failOn                string
	maxLag                time.Duration
	force                 bool
	watch, lease          time.Duration
	yes                   bool
	payload, topic        string
	messageID, metadata   string
	jobID                 int64
	scan, limit           int
	done                  bool
}

// urls returns every URL the command may connect to, for redactError.
func (o *options) urls() []string {
	var urls []string
	for _, u := range []string{o.redisURL, o.postgresURL, os.Getenv("REDIS_URL"), os.Getenv("DATABASE_URL")} {
		if u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// command is one of jobonce's commands.
type command struct {
	name    string
	args    []string                           // its arguments' names
	summary string                             // one line, for the overview
	about   string                             // what it does, for its usage
	keyed   bool                               // it takes -prefix and -plain
	prefix  bool                               // it takes -prefix alone
	offline bool                               // it reads no store: no store flags
	flags   func(fs *flag.FlagSet, o *options) // its own flags; nil for none
	run     func(ctx context.Context, c *invocation) error
}

// invocation is a command's parsed command line.
type invocation struct {
	opt  *options
	set  map[string]bool // the names of the flags given
	keys []string        // the arguments after the command
	in   io.Reader
	out  io.Writer
}

// commands are jobonce's commands but help, in the order help lists them.
var commands []*command

func init() {
	commands = []*command{checkCommand, listCommand, keyCommand, inspectCommand, releaseCommand, forgetCommand}
}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (c *command) synopsis() string {
	return strings.TrimSpace(c.name + " " + strings.Join(c.args, " "))
}

// argsText says what c takes, for an error: "no argument", "one KEY" or
// "ADAPTER and NAME".
func (c *command) argsText() string {
	switch len(c.args) {
	case 0:
		return "no argument"
	case 1:
		return "one " + c.args[0]
	}
	return joinAnd(c.args)
}

// flagSet returns c's flags, bound to o, printing to out: the store's
// (unless c is offline), the key's when c takes a KEY, and its own. Its
// Usage prints c's usage.
func (c *command) flagSet(o *options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("jobonce "+c.name, flag.ContinueOnError)
	fs.SetOutput(out)
	if !c.offline {
		storeFlags(fs, o)
	}
	if c.keyed {
		keyFlags(fs, o)
	} else if c.prefix {
		prefixFlag(fs, o)
	}
	if c.flags != nil {
		c.flags(fs, o)
	}
	fs.Usage = func() { c.usage(out) }
	return fs
}

// usage prints c's usage: its synopsis, what it does, and its flags.
func (c *command) usage(out io.Writer) {
	fmt.Fprintf(out, "usage: jobonce [flags] %s\n\n%s\n", c.synopsis(), c.about)
	if c.flags != nil {
		fmt.Fprintf(out, "\nFlags of %s:\n", c.name)
		printFlags(out, func(fs *flag.FlagSet, o *options) { c.flags(fs, o) })
	}
	if c.keyed {
		fmt.Fprintln(out, "\nFlags of the key (they must match the Guard's Config):")
		printFlags(out, keyFlags)
	} else if c.prefix {
		fmt.Fprintln(out, "\nFlags of the Guard (they must match its Config):")
		printFlags(out, prefixFlag)
	}
	if !c.offline {
		fmt.Fprintln(out, "\nFlags of the store:")
		printFlags(out, storeFlags)
	}
	fmt.Fprintln(out, "\nFlags may come before or after the command and KEY; no argument after -- is a flag.")
}

// printFlags prints the flags add defines, as flag.PrintDefaults does.
func printFlags(out io.Writer, add func(*flag.FlagSet, *options)) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	add(fs, new(options))
	fs.SetOutput(out)
	fs.PrintDefaults()
}

// defaultRedisURL is the Redis used when neither -redis, -postgres,
// $REDIS_URL nor $DATABASE_URL names a store.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// storeFlags defines the flags that name the store, which every command has.
// No default comes from the environment: usage prints defaults, and a URL
// may hold a password.
func storeFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.redisURL, "redis", "", "Redis URL; redis://host:port?addr=host:port&addr=... names a Cluster's nodes (default $REDIS_URL, or "+defaultRedisURL+" when neither it nor $DATABASE_URL is set)")
	fs.StringVar(&o.postgresURL, "postgres", "", "PostgreSQL URL, for a Guard on pgstore (default $DATABASE_URL when neither -redis nor $REDIS_URL is set)")
	fs.StringVar(&o.schema, "schema", "", "PostgreSQL: the Guard's pgstore.Config.Schema (default none: the connection's search_path finds the table)")
	fs.StringVar(&o.table, "table", defaultTable, "PostgreSQL: the Guard's pgstore.Config.Table")
}

// keyFlags defines the flags that derive a stored key from KEY.
func keyFlags(fs *flag.FlagSet, o *options) {
	prefixFlag(fs, o)
	fs.BoolVar(&o.plain, "plain", false, "the Guard uses Config.PlainKeys")
}

// prefixFlag defines -prefix, the start of every stored key.
func prefixFlag(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.prefix, "prefix", defaultPrefix, "the Guard's Config.KeyPrefix")
}

// everyFlag returns a flag set holding every command's flags, bound to o;
// a flag two commands share (release's and list's -lease) is in it once.
func everyFlag(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("jobonce", flag.ContinueOnError)
	storeFlags(fs, o)
	keyFlags(fs, o)
	for _, c := range commands {
		if c.flags == nil {
			continue
		}
		own := flag.NewFlagSet("", flag.ContinueOnError)
		c.flags(own, o)
		own.VisitAll(func(f *flag.Flag) {
			if fs.Lookup(f.Name) == nil {
				fs.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	return fs
}

// setFlags returns the names of the flags given to fs.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// foreignFlag adds to a parse error of cmd's flags which commands take the
// flag it names, when some do.
func foreignFlag(err error, cmd *command) error {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return err
	}
	var owners []string
	for _, c := range commands {
		if c.flagSet(new(options), io.Discard).Lookup(name) != nil {
			owners = append(owners, c.name)
		}
	}
	if len(owners) == 0 {
		return err
	}
	return fmt.Errorf("%w (a flag of %s, not of %s)", err, joinAnd(owners), cmd.name)
}

// overview prints jobonce's usage: its commands and what they share.
func overview(out io.Writer) {
	fmt.Fprintln(out, "usage: jobonce [flags] COMMAND [ARGUMENTS]")
	fmt.Fprintln(out, "\njobonce checks and repairs the store of a jobonce Guard: Redis (-redis) or PostgreSQL (-postgres).")
	fmt.Fprintln(out, "\nCommands:")
	rows := [][2]string{}
	for _, c := range commands {
		rows = append(rows, [2]string{c.synopsis(), c.summary})
	}
	rows = append(rows, [2]string{"help [COMMAND]", "print a command's usage and flags (also: jobonce COMMAND -h)"})
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	for _, r := range rows {
		fmt.Fprintf(out, "  %-*s  %s\n", width, r[0], r[1])
	}
	fmt.Fprintln(out, "\nKEY is the key the application passes to the Guard, or the stored key 0x... that inspect and key print.")
	fmt.Fprintln(out, "\nFlags of the store (every command but key):")
	printFlags(out, storeFlags)
	fmt.Fprintln(out, "\nFlags may come before or after the command and KEY; no argument after -- is a flag.")
	fmt.Fprintln(out, "Exit status: 0 done, 1 failed, refused or the key absent (or no command), 2 check found a risk.")
}

// runHelp runs "jobonce help [COMMAND]", and jobonce with no command.
func runHelp(args []string, out io.Writer) error {
	fs := everyFlag(new(options))
	fs.SetOutput(out)
	fs.Usage = func() { overview(out) }
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		overview(out)
		return fmt.Errorf("no command: give one of %s (jobonce help COMMAND prints its usage)", commandNames())
	}
	switch len(rest) {
	case 1:
		overview(out)
		return nil
	case 2:
		if c := findCommand(rest[1]); c != nil {
			c.usage(out)
			return nil
		}
		if rest[1] == "help" {
			overview(out)
			return nil
		}
		return fmt.Errorf("help: unknown command %q: the commands are %s", rest[1], commandNames())
	}
	return fmt.Errorf("help takes at most one COMMAND, got %d", len(rest)-1)
}

// commandNames returns the commands' names, for a message.
func commandNames() string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	names = append(names, "help")
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " or " + names[last]
}

// joinAnd joins names as a sentence does: "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " and " + names[last]
}
