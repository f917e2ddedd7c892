package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerignore is .dockerignore's patterns, read as Docker reads them
// (moby/patternmatcher): a path is left out of the build context when the
// last pattern matching it, or one of its parent directories, is not an
// exception ("!").
type dockerignore []struct {
	re        *regexp.Regexp
	exception bool
}

func readDockerignore(t *testing.T, file string) dockerignore {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("%s: %v (COPY . . would send everything: data dirs, tokens, .git)", file, err)
	}
	defer f.Close()
	var d dockerignore
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		ex := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(p, "!")), "/")
		d = append(d, struct {
			re        *regexp.Regexp
			exception bool
		}{globRegexp(p), ex})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// globRegexp is a .dockerignore pattern as a regular expression: ** any
// number of directories, * and ? within one path element.
func globRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case p[i] == '*':
			b.WriteString("[^/]*")
		case p[i] == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// excluded says whether rel (slash-separated, relative to the context)
// is left out of the build context.
func (d dockerignore) excluded(rel string) bool {
	out := false
	for _, p := range d {
		for dir := rel; dir != "."; dir = path.Dir(dir) {
			if p.re.MatchString(dir) {
				out = !p.exception
				break
			}
		}
	}
	return out
}

// TestDockerignore: `COPY . .` (Dockerfile) never sends a developer's
// state into a build — the gateway's data dir with its signing key, a
// proxy's, the tokens the README's walk writes, .git, CI screenshots,
// editor and OS files, binaries built at the root — wherever they lie in
// the tree, and sends everything the images' builds read: go.mod, go.sum,
// every Go file and embedded file of the module's packages that
// ./cmd/portcullis needs, with and without -tags proxyonly.
func TestDockerignore(t *testing.T) {
	d := readDockerignore(t, "../.dockerignore")
	for _, p := range []string{
		"portcullis-data/portcullis.db", "portcullis-data/signing.key", "cmd/portcullis/portcullis-data/portcullis.db-wal",
		"portcullis-proxy/ca.key", "portcullis-proxy/policy.signed",
		"orders.token", "support.token", "examples/node-3.token", "deploy/compose/orders.token",
		".git/config", ".git", ".ci/screens/walk-queue.png", ".ci/run",
		".DS_Store", "web/.DS_Store", ".idea/workspace.xml", ".vscode/settings.json", "README.md.swp", "store/store.go~",
		"portcullis", "cmd/portcullis/portcullis", "cmd/portcullis/portcullis.test", "fleetload", "coverage.out",
	} {
		if !d.excluded(p) {
			t.Errorf(".dockerignore sends %s into the build", p)
		}
	}

	needed := []string{"go.mod", "go.sum"}
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// What the Dockerfile copies from the context by name.
	for _, m := range regexp.MustCompile(`(?m)^COPY ((?:[^-\s]\S*\s+)+)\S+$`).FindAllStringSubmatch(string(dockerfile), -1) {
		for _, src := range strings.Fields(m[1]) {
			if src != "." {
				needed = append(needed, src)
			}
		}
	}
	for _, tags := range []string{"", "proxyonly"} {
		needed = append(needed, buildFiles(t, tags)...)
	}
	if len(needed) < 100 {
		t.Fatalf("the build reads only %d files? %v", len(needed), needed)
	}
	for _, f := range needed {
		if d.excluded(f) {
			t.Errorf(".dockerignore leaves out %s, which the image's build reads", f)
		}
	}
}

// buildFiles are the files of this module that go build ./cmd/portcullis
// reads with tags: each package's Go files and embedded files, relative
// to the module's root.
func buildFiles(t *testing.T, tags string) []string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-tags="+tags, "-json=Dir,GoFiles,CgoFiles,EmbedFiles,Module", "./cmd/portcullis")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var files []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Dir                           string
			GoFiles, CgoFiles, EmbedFiles []string
			Module                        *struct{ Main bool }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue // the standard library, or a module go mod download fetches
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(append(p.GoFiles, p.CgoFiles...), p.EmbedFiles...) {
			files = append(files, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	return files
}

// TestDockerignorePatterns checks the matcher the test above relies on.
func TestDockerignorePatterns(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"**/*.token", "orders.token", true},
		{"**/*.token", "a/b/orders.token", true},
		{"*.token", "a/orders.token", false},
		{".git", ".git/objects/ab", true},
		{"/portcullis", "portcullis", true},
		{"/portcullis", "cmd/portcullis/main.go", false},
		{"**/portcullis-data", "x/portcullis-data/portcullis.db", true},
		{"**/*~", "go.mod", false},
	} {
		d := dockerignore{{re: globRegexp(strings.TrimPrefix(path.Clean("/"+c.pattern), "/"))}}
		if got := d.excluded(c.path); got != c.want {
			t.Errorf("%q excludes %q: %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

// stages are the Dockerfile's stages by name ("" for the last, the
// default target), each as its instructions' lines.
func stages(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	name := "-"
	var cur []string
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if f := strings.Fields(l); f[0] == "FROM" {
			out[name] = cur
			name, cur = "", nil
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				name = f[3]
			}
		}
		cur = append(cur, l)
	}
	out[name] = cur
	return out
}

// TestGatewayImage: the gateway's image (the Dockerfile's default target)
// keeps its state on a declared volume: its default --data-dir
// (./portcullis-data, relative to the working directory) lies on the
// volume the image declares and creates for the nonroot user, whatever
// command the container runs; and every image the compose files and
// manifests use carries its OCI labels, filled from build args.
func TestGatewayImage(t *testing.T) {
	st := stages(t)
	gw, ok := st[""]
	if !ok {
		t.Fatal("the Dockerfile's last stage (the gateway's image) is named: docker build . builds it")
	}
	var volumes []string
	workdir := ""
	for _, l := range gw {
		f := strings.Fields(l)
		switch f[0] {
		case "VOLUME":
			var v []string
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(l, "VOLUME"))), &v); err != nil {
				v = f[1:]
			}
			volumes = append(volumes, v...)
		case "WORKDIR":
			workdir = f[1]
		case "CMD", "ENTRYPOINT":
			if strings.Contains(l, "--data-dir") {
				t.Errorf("%s: the data dir comes from the working directory, not a flag a command given to docker run drops", l)
			}
		}
	}
	dataDir := path.Join(workdir, "portcullis-data") // the CLI's default --data-dir
	onVolume := false
	for _, v := range volumes {
		if dataDir == v || strings.HasPrefix(dataDir, v+"/") {
			onVolume = true
			if !hasLinePrefix(gw, `COPY --from=build --chown=65532:65532 --chmod=700 /out`+v+` `+v) {
				t.Errorf("the volume %s is not created for the nonroot user", v)
			}
		}
	}
	if !onVolume {
		t.Errorf("the gateway's default data dir %s is on none of its volumes %v: SQLite and the signing keys would live in the container's layer", dataDir, volumes)
	}

	for _, stage := range []string{"", "proxy", "tools", "netinit"} {
		labels := map[string]string{}
		args := map[string]bool{}
		for _, l := range st[stage] {
			if v, ok := strings.CutPrefix(l, "ARG "); ok {
				args[strings.Fields(v)[0]] = true
			}
			if v, ok := strings.CutPrefix(l, "LABEL "); ok {
				for _, m := range regexp.MustCompile(`(\S+)="([^"]*)"`).FindAllStringSubmatch(v, -1) {
					labels[m[1]] = m[2]
				}
			}
		}
		for key, arg := range map[string]string{"title": "", "description": "", "source": "SOURCE", "licenses": "LICENSES", "version": "VERSION", "revision": "REVISION"} {
			v := labels["org.opencontainers.image."+key]
			if v == "" {
				t.Errorf("stage %q has no label org.opencontainers.image.%s", stage, key)
			}
			if arg != "" && (v != "${"+arg+"}" || !args[arg]) {
				t.Errorf("stage %q: org.opencontainers.image.%s is %q, want the build arg ${%s} (declared in the stage)", stage, key, v, arg)
			}
		}
	}
	// The build args' defaults: declared before the first FROM.
	for _, arg := range []string{"VERSION", "REVISION", "SOURCE", "LICENSES"} {
		if !hasLinePrefix(st["-"], "ARG "+arg+"=") {
			t.Errorf("the Dockerfile gives build arg %s no default before its first FROM", arg)
		}
	}
}

// hasLinePrefix says whether a line of lines starts with prefix.
func hasLinePrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
