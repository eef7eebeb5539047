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
//	id                 print "id: uid=U gid=G groups=G1,G2"
//	caps               print "caps: CapEff=HEX" (from /proc/self/status)
//	statfs PATH        print "statfs PATH: type=0xMAGIC bytes=SIZE"; exit 12 if that fails
//	ls DIR             print "ls DIR: NAME NAME…" (sorted; "ls-error: …" and exit 12 if that fails)
//	stat PATH          print "stat PATH: char|block|dir|file|link|other MAJOR:MINOR"; exit 12 if that fails
//	watch PATH         print "watch: CONTENT" now and whenever PATH's content changes, forever
//	rm PATH            remove PATH; exit 12 if that fails
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
		case "flood", "interleave":
			script = runLogVerb(verb, script) // logverbs.go
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
		case "id":
			groups, _ := os.Getgroups()
			var gs []string
			for _, g := range groups {
				gs = append(gs, strconv.Itoa(g))
			}
			fmt.Printf("id: uid=%d gid=%d groups=%s\n", os.Getuid(), os.Getgid(), strings.Join(gs, ","))
		case "caps":
			b, err := os.ReadFile("/proc/self/status")
			if err != nil {
				fmt.Println("caps-error:", err)
				return 12
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
					fmt.Println("caps: CapEff=" + strings.TrimSpace(v))
				}
			}
		case "statfs":
			path := arg()
			var st syscall.Statfs_t
			if err := syscall.Statfs(path, &st); err != nil {
				fmt.Println("statfs-error:", err)
				return 12
			}
			fmt.Printf("statfs %s: type=%#x bytes=%d\n", path, st.Type, uint64(st.Blocks)*uint64(st.Bsize))
		case "ls":
			dir := arg()
			entries, err := os.ReadDir(dir)
			if err != nil {
				fmt.Println("ls-error:", err)
				return 12
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			fmt.Printf("ls %s: %s\n", dir, strings.Join(names, " "))
		case "stat":
			path := arg()
			var st syscall.Stat_t
			if err := syscall.Lstat(path, &st); err != nil {
				fmt.Println("stat-error:", err)
				return 12
			}
			kind := map[uint32]string{syscall.S_IFCHR: "char", syscall.S_IFBLK: "block", syscall.S_IFDIR: "dir",
				syscall.S_IFREG: "file", syscall.S_IFLNK: "link"}[st.Mode&syscall.S_IFMT]
			if kind == "" {
				kind = "other"
			}
			rdev := uint64(st.Rdev) //nolint:unconvert // 32 bits on some architectures
			major, minor := (rdev>>8)&0xfff|(rdev>>32)&^0xfff, rdev&0xff|(rdev>>12)&^0xff
			fmt.Printf("stat %s: %s %d:%d\n", path, kind, major, minor)
		case "watch":
			path := arg()
			last := "\x00"
			for {
				b, err := os.ReadFile(path)
				cur := string(b)
				if err != nil {
					cur = "error: " + err.Error()
				}
				if cur != last {
					fmt.Printf("watch: %s\n", cur)
					last = cur
				}
				time.Sleep(50 * time.Millisecond)
			}
		case "rm":
			path := arg()
			if err := os.Remove(path); err != nil {
				fmt.Println("rm-error:", err)
				return 12
			}
			fmt.Println("removed", path)
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
