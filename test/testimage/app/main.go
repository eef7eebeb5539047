// Command app is the program inside Fleet's test image (see package
// testimage). It runs a small script of actions given as arguments, so one
// image serves every runtime test:
//
//	app echo hello write /data/out hi exit 3
//
// Actions, run in order:
//
//	echo TEXT          print TEXT to stdout
//	stderr TEXT        print TEXT to stderr
//	env NAME           print NAME=value (or NAME=<unset>)
//	args               print "args:" and every argument, space separated
//	environ            print the whole environment, sorted
//	pwd                print "pwd: DIR"
//	hostname           print "hostname: NAME"
//	write PATH TEXT    write TEXT to PATH; exit 11 if that fails
//	write-fail PATH    try to write PATH; exit 13 if that succeeds
//	read PATH          print "read: CONTENT"; exit 12 if that fails
//	spam N             print N lines of 100 bytes
//	ignore-term        ignore SIGTERM from now on
//	serve ADDR         serve HTTP on ADDR ("/" answers "ok"), forever
//	sleep DURATION     sleep; "forever" blocks until a signal
//	exit CODE          exit with CODE
//
// With no arguments the script is taken from the APP_SCRIPT environment
// variable (space separated). When the script ends the program exits 0.
// SIGTERM makes it print "term" and exit 0 unless ignore-term ran.
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

var ignoreTerm atomic.Bool

func main() {
	script := os.Args[1:]
	if len(script) == 0 {
		script = strings.Fields(os.Getenv("APP_SCRIPT"))
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM && ignoreTerm.Load() {
				fmt.Println("term ignored")
				continue
			}
			fmt.Println("term")
			os.Exit(0)
		}
	}()
	os.Exit(run(script))
}

// run executes script and returns the exit code.
func run(script []string) int {
	for len(script) > 0 {
		verb := script[0]
		script = script[1:]
		arg := func() string {
			if len(script) == 0 {
				fmt.Fprintf(os.Stderr, "app: %s needs an argument\n", verb)
				os.Exit(2)
			}
			a := script[0]
			script = script[1:]
			return a
		}
		switch verb {
		case "echo":
			fmt.Println(arg())
		case "stderr":
			fmt.Fprintln(os.Stderr, arg())
		case "env":
			name := arg()
			v, ok := os.LookupEnv(name)
			if !ok {
				v = "<unset>"
			}
			fmt.Printf("%s=%s\n", name, v)
		case "args":
			fmt.Println("args:", strings.Join(os.Args[1:], " "))
		case "environ":
			env := os.Environ()
			sort.Strings(env)
			for _, e := range env {
				fmt.Println(e)
			}
		case "pwd":
			wd, err := os.Getwd()
			if err != nil {
				wd = "error: " + err.Error()
			}
			fmt.Println("pwd:", wd)
		case "hostname":
			h, err := os.Hostname()
			if err != nil {
				h = "error: " + err.Error()
			}
			fmt.Println("hostname:", h)
		case "write":
			path, text := arg(), arg()
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				fmt.Println("write-error:", err)
				return 11
			}
			fmt.Println("wrote", path)
		case "write-fail":
			path := arg()
			err := os.WriteFile(path, []byte("x"), 0o644)
			if err == nil {
				fmt.Println("unexpected write success:", path)
				return 13
			}
			fmt.Println("write refused:", err)
		case "read":
			b, err := os.ReadFile(arg())
			if err != nil {
				fmt.Println("read-error:", err)
				return 12
			}
			fmt.Printf("read: %s\n", b)
		case "spam":
			n, err := strconv.Atoi(arg())
			if err != nil {
				fmt.Fprintln(os.Stderr, "app: spam:", err)
				return 2
			}
			line := strings.Repeat("x", 99)
			for i := 0; i < n; i++ {
				fmt.Println(line)
			}
		case "ignore-term":
			ignoreTerm.Store(true)
		case "serve":
			addr := arg()
			http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintln(w, "ok")
			})
			fmt.Println("serving", addr)
			if err := http.ListenAndServe(addr, nil); err != nil {
				fmt.Fprintln(os.Stderr, "app: serve:", err)
				return 14
			}
		case "sleep":
			d := arg()
			if d == "forever" {
				select {}
			}
			dur, err := time.ParseDuration(d)
			if err != nil {
				fmt.Fprintln(os.Stderr, "app: sleep:", err)
				return 2
			}
			time.Sleep(dur)
		case "exit":
			code, err := strconv.Atoi(arg())
			if err != nil {
				fmt.Fprintln(os.Stderr, "app: exit:", err)
				return 2
			}
			return code
		default:
			fmt.Fprintf(os.Stderr, "app: unknown action %q\n", verb)
			return 2
		}
	}
	return 0
}
