package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/mcpserver"
	"github.com/toolgate/toolgate/internal/notify"
)

func parse(args ...string) (config, error) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseFlags(fs, args)
}

// The tuning flags reach the controller's Options; without them, the defaults do.
func TestFlagsReachTheOptions(t *testing.T) {
	c, err := parse("--intent-workers=3", "--execution-workers=4", "--approval-workers=1", "--task-workers=5", "--spent-job-ttl=90s", "--mcp-max-wait=2m", "--call-retention=10m", "--task-ttl-after-finished=2h")
	if err != nil {
		t.Fatal(err)
	}
	if c.mcpMaxWait != 2*time.Minute {
		t.Errorf("MCP max wait %s, want 2m", c.mcpMaxWait)
	}
	if want := (controller.Workers{Intent: 3, Execution: 4, Approval: 1, Task: 5}); c.opts.Workers != want {
		t.Errorf("workers %+v, want %+v", c.opts.Workers, want)
	}
	if c.opts.SpentJobTTL != 90*time.Second {
		t.Errorf("spent-job TTL %s, want 90s", c.opts.SpentJobTTL)
	}
	if c.opts.CallRetention != 10*time.Minute || c.opts.TaskTTLAfterFinished != 2*time.Hour {
		t.Errorf("call retention %s, task TTL %s, want 10m and 2h", c.opts.CallRetention, c.opts.TaskTTLAfterFinished)
	}
	c, err = parse("--notification-namespace=ops", "--notification-workers=3", "--notification-timeout=4s", "--notification-backoff=1s", "--notification-max-backoff=1m", "--notification-max-attempts=7")
	if err != nil {
		t.Fatal(err)
	}
	if want := (controller.Notifications{Namespace: "ops", Workers: 3, Timeout: 4 * time.Second, Retry: notify.Retry{Base: time.Second, Cap: time.Minute, MaxAttempts: 7}}); c.opts.Notifications != want {
		t.Errorf("notifications %+v, want %+v", c.opts.Notifications, want)
	}
	c, err = parse()
	if err != nil {
		t.Fatal(err)
	}
	if want := (controller.Notifications{Namespace: "", Workers: controller.DefaultNotificationWorkers, Timeout: controller.DefaultNotificationTimeout, Retry: notify.DefaultRetry}); c.opts.Notifications != want {
		t.Errorf("default notifications %+v, want %+v", c.opts.Notifications, want)
	}
	if c.opts.Workers != controller.DefaultWorkers || c.opts.SpentJobTTL != controller.DefaultSpentJobTTL || c.mcpMaxWait != mcpserver.DefaultMaxWait {
		t.Errorf("defaults: workers %+v, spent-job TTL %s, MCP max wait %s", c.opts.Workers, c.opts.SpentJobTTL, c.mcpMaxWait)
	}
}

// A value the controller cannot run with is refused, naming the flag, instead of
// silently becoming a default.
func TestFlagsRefuseBadValues(t *testing.T) {
	for args, want := range map[string]string{
		"--spent-job-ttl=0":                 "--spent-job-ttl must be positive",
		"--call-retention=0":                "--call-retention must be positive",
		"--task-ttl-after-finished=-1h":     "--task-ttl-after-finished must be positive",
		"--spent-job-ttl=-1m":               "--spent-job-ttl must be positive",
		"--intent-workers=0":                "--intent-workers must be at least 1, got 0",
		"--execution-workers=-2":            "--execution-workers must be at least 1, got -2",
		"--task-workers=0":                  "--task-workers must be at least 1",
		"--model-endpoints=ftp://x.example": "--model-endpoints",
		"--mcp-max-wait=0":                  "--mcp-max-wait must be positive",
		"--mcp-max-wait=-5s":                "--mcp-max-wait must be positive",
		"--notification-workers=0":          "--notification-workers must be at least 1, got 0",
		"--notification-timeout=0":          "--notification-timeout must be positive",
		"--notification-backoff=-1s":        "--notification-backoff must be positive",
		"--notification-max-backoff=1s":     "--notification-max-backoff must be at least --notification-backoff (5s), got 1s",
		"--notification-max-attempts=0":     "--notification-max-attempts must be between 1 and 100, got 0",
	} {
		if _, err := parse(args); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", args, err, want)
		}
	}
}

// The archive's connection string is read from a file (a mounted Secret), never the
// command line, and the controller starts without reaching the database.
func TestArchiveDSNFile(t *testing.T) {
	c, err := parse()
	if err != nil || c.opts.Archive != nil {
		t.Fatalf("without the flag: archive %v, err %v; want none", c.opts.Archive, err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "dsn")
	if err := os.WriteFile(good, []byte("host=/nonexistent user=toolgate dbname=archive\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = parse("--archive-dsn-file=" + good)
	if err != nil || c.opts.Archive == nil {
		t.Fatalf("with a DSN file: archive %v, err %v", c.opts.Archive, err)
	}
	c.opts.Archive.Close()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("postgres://[::1"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		empty:                         "is empty: it must hold the archive's PostgreSQL connection string",
		filepath.Join(dir, "missing"): "--archive-dsn-file",
		bad:                           "the connection string",
	} {
		if _, err := parse("--archive-dsn-file=" + file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", file, err, want)
		}
	}
}

// The archive's API serves the archive: without one it is refused at start.
func TestArchiveAPINeedsTheArchive(t *testing.T) {
	if _, err := parse("--archive-api-bind-address=:8443"); err == nil || !strings.Contains(err.Error(), "--archive-api-bind-address needs --archive-dsn-file") {
		t.Fatalf("the API without an archive: %v", err)
	}
	dsn := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(dsn, []byte("host=db user=toolgate dbname=toolgate"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parse("--archive-dsn-file="+dsn, "--archive-api-bind-address=:8443")
	if err != nil || c.archiveAPI.addr != ":8443" {
		t.Fatalf("the API with an archive: %+v, %v", c.archiveAPI, err)
	}
	c.opts.Archive.Close()
	if c, err := parse(); err != nil || c.archiveAPI.addr != "0" {
		t.Fatalf("the API is off by default: %+v, %v", c.archiveAPI, err)
	}
}
