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
//	hold-lock PATH RELEASE        flock PATH, print "locked PATH", wait until RELEASE exists, unlock
//	spawn-hold-lock PATH RELEASE  run hold-lock PATH RELEASE in a child process and go on
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
		act, ok := actions[verb]
		if !ok {
			fmt.Fprintf(os.Stderr, "app: unknown action %q\n", verb)
			return 2
		}
		if len(script) < act.args {
			fmt.Fprintf(os.Stderr, "app: %s needs an argument\n", verb)
			return 2
		}
		if code, exit := act.run(script[:act.args]); exit {
			return code
		}
		script = script[act.args:]
	}
	return 0
}

// An action is one verb of the script: it takes args arguments, and run
// does it, reporting whether the program exits now, and with what code.
type action struct {
	args int
	run  func(args []string) (code int, exit bool)
}

// next is what an action that succeeded returns: on to the next one.
func next() (int, bool) { return 0, false }

// exitWith is what an action that ends the program returns.
func exitWith(code int) (int, bool) { return code, true }

// actions are the verbs of the script, as the package doc lists them.
var actions = map[string]action{
	"echo":   {1, func(a []string) (int, bool) { fmt.Println(a[0]); return next() }},
	"stderr": {1, func(a []string) (int, bool) { fmt.Fprintln(os.Stderr, a[0]); return next() }},
	"env":    {1, printEnv},
	"args": {0, func([]string) (int, bool) {
		fmt.Println("args:", strings.Join(os.Args[1:], " "))
		return next()
	}},
	"environ": {0, printEnviron},
	"pwd": {0, func([]string) (int, bool) {
		wd, err := os.Getwd()
		if err != nil {
			wd = "error: " + err.Error()
		}
		fmt.Println("pwd:", wd)
		return next()
	}},
	"hostname": {0, func([]string) (int, bool) {
		h, err := os.Hostname()
		if err != nil {
			h = "error: " + err.Error()
		}
		fmt.Println("hostname:", h)
		return next()
	}},
	"write":      {2, write},
	"flood":      {2, flood},
	"interleave": {1, interleave},
	"write-fail": {1, writeFail},
	"read":       {1, read},
	"spam":       {1, spam},
	"ignore-term": {0, func([]string) (int, bool) {
		ignoreTerm.Store(true)
		return next()
	}},
	"serve":           {1, serve},
	"sleep":           {1, sleep},
	"id":              {0, printID},
	"caps":            {0, printCaps},
	"statfs":          {1, printStatfs},
	"ls":              {1, list},
	"stat":            {1, printStat},
	"watch":           {1, watch},
	"rm":              {1, remove},
	"hold-lock":       {2, holdLock},
	"spawn-hold-lock": {2, spawnHoldLock},
	"exit": {1, func(a []string) (int, bool) {
		code, err := strconv.Atoi(a[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, "app: exit:", err)
			return exitWith(2)
		}
		return exitWith(code)
	}},
}

// printEnv: env NAME.
func printEnv(a []string) (int, bool) {
	name := a[0]
	v, ok := os.LookupEnv(name)
	if !ok {
		v = "<unset>"
	}
	fmt.Printf("%s=%s\n", name, v)
	return next()
}

// printEnviron: environ.
func printEnviron([]string) (int, bool) {
	env := os.Environ()
	sort.Strings(env)
	for _, e := range env {
		fmt.Println(e)
	}
	return next()
}

// write: write PATH TEXT.
func write(a []string) (int, bool) {
	path, text := a[0], a[1]
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		fmt.Println("write-error:", err)
		return exitWith(11)
	}
	fmt.Println("wrote", path)
	return next()
}

// writeFail: write-fail PATH.
func writeFail(a []string) (int, bool) {
	path := a[0]
	err := os.WriteFile(path, []byte("x"), 0o644)
	if err == nil {
		fmt.Println("unexpected write success:", path)
		return exitWith(13)
	}
	fmt.Println("write refused:", err)
	return next()
}

// read: read PATH.
func read(a []string) (int, bool) {
	b, err := os.ReadFile(a[0])
	if err != nil {
		fmt.Println("read-error:", err)
		return exitWith(12)
	}
	fmt.Printf("read: %s\n", b)
	return next()
}

// spam: spam N.
func spam(a []string) (int, bool) {
	n, err := strconv.Atoi(a[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "app: spam:", err)
		return exitWith(2)
	}
	line := strings.Repeat("x", 99)
	for i := 0; i < n; i++ {
		fmt.Println(line)
	}
	return next()
}

// serve: serve ADDR.
func serve(a []string) (int, bool) {
	addr := a[0]
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	fmt.Println("serving", addr)
	if err := http.ListenAndServe(addr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "app: serve:", err)
		return exitWith(14)
	}
	return next()
}

// sleep: sleep DURATION.
func sleep(a []string) (int, bool) {
	d := a[0]
	if d == "forever" {
		select {}
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		fmt.Fprintln(os.Stderr, "app: sleep:", err)
		return exitWith(2)
	}
	time.Sleep(dur)
	return next()
}

// printID: id.
func printID([]string) (int, bool) {
	groups, _ := os.Getgroups()
	var gs []string
	for _, g := range groups {
		gs = append(gs, strconv.Itoa(g))
	}
	fmt.Printf("id: uid=%d gid=%d groups=%s\n", os.Getuid(), os.Getgid(), strings.Join(gs, ","))
	return next()
}

// printCaps: caps.
func printCaps([]string) (int, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Println("caps-error:", err)
		return exitWith(12)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			fmt.Println("caps: CapEff=" + strings.TrimSpace(v))
		}
	}
	return next()
}

// printStatfs: statfs PATH.
func printStatfs(a []string) (int, bool) {
	path := a[0]
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		fmt.Println("statfs-error:", err)
		return exitWith(12)
	}
	fmt.Printf("statfs %s: type=%#x bytes=%d\n", path, st.Type, uint64(st.Blocks)*uint64(st.Bsize))
	return next()
}

// list: ls DIR.
func list(a []string) (int, bool) {
	dir := a[0]
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Println("ls-error:", err)
		return exitWith(12)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	fmt.Printf("ls %s: %s\n", dir, strings.Join(names, " "))
	return next()
}

// printStat: stat PATH.
func printStat(a []string) (int, bool) {
	path := a[0]
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		fmt.Println("stat-error:", err)
		return exitWith(12)
	}
	kind := map[uint32]string{syscall.S_IFCHR: "char", syscall.S_IFBLK: "block", syscall.S_IFDIR: "dir",
		syscall.S_IFREG: "file", syscall.S_IFLNK: "link"}[st.Mode&syscall.S_IFMT]
	if kind == "" {
		kind = "other"
	}
	rdev := uint64(st.Rdev) //nolint:unconvert // 32 bits on some architectures
	major, minor := (rdev>>8)&0xfff|(rdev>>32)&^0xfff, rdev&0xff|(rdev>>12)&^0xff
	fmt.Printf("stat %s: %s %d:%d\n", path, kind, major, minor)
	return next()
}

// watch: watch PATH, forever.
func watch(a []string) (int, bool) {
	path := a[0]
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
}

// remove: rm PATH.
func remove(a []string) (int, bool) {
	path := a[0]
	if err := os.Remove(path); err != nil {
		fmt.Println("rm-error:", err)
		return exitWith(12)
	}
	fmt.Println("removed", path)
	return next()
}

// holdLock: hold-lock PATH RELEASE takes an exclusive flock on PATH
// (creating it), prints "locked PATH", waits until RELEASE exists,
// then unlocks and prints "released PATH".
func holdLock(a []string) (int, bool) {
	f, err := os.OpenFile(a[0], os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Println("lock-error:", err)
		return exitWith(12)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		fmt.Println("lock-error:", err)
		return exitWith(12)
	}
	fmt.Println("locked", a[0])
	for {
		if _, err := os.Stat(a[1]); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		fmt.Println("unlock-error:", err)
		return exitWith(12)
	}
	fmt.Println("released", a[0])
	return next()
}

// spawnHoldLock: spawn-hold-lock PATH RELEASE runs "hold-lock PATH
// RELEASE" in a child process and goes on: the lock holder is not the
// container's first process, so a test can kill it alone.
func spawnHoldLock(a []string) (int, bool) {
	self, err := os.Executable()
	if err != nil {
		fmt.Println("spawn-error:", err)
		return exitWith(12)
	}
	p, err := os.StartProcess(self, []string{self, "hold-lock", a[0], a[1]}, &os.ProcAttr{Files: []*os.File{nil, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Println("spawn-error:", err)
		return exitWith(12)
	}
	fmt.Println("spawned lock holder pid", p.Pid)
	go func() {
		st, _ := p.Wait()
		fmt.Println("lock holder exited:", st)
	}()
	return next()
}
