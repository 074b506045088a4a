package outbox_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	outbox "github.com/relayer-go/watermill-outbox"
)

// readmeMaxBytes bounds README.md: it is a first screen, not the manual.
const readmeMaxBytes = 12 * 1024

// docFiles are the markdown files whose relative links TestDocLinks checks.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "benchmarks/README.md"}
	more, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("docs/*.md: no files")
	}
	return append(files, more...)
}

func TestReadmeSize(t *testing.T) {
	fi, err := os.Stat("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > readmeMaxBytes {
		t.Errorf("README.md is %d bytes, more than %d: move the detail to a package doc, docs/ or benchmarks/README.md", fi.Size(), readmeMaxBytes)
	}
}

// TestDocLinks fails when a relative link of the documentation points at a file or
// directory that does not exist, or at a #anchor that is no heading of its target.
func TestDocLinks(t *testing.T) {
	headings := map[string]map[string]bool{} // markdown file → its heading slugs
	slugsOf := func(path string) map[string]bool {
		if s, ok := headings[path]; ok {
			return s
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := headingSlugs(string(b))
		headings[path] = s
		return s
	}
	checked := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(b)) {
			target := l.target
			if isExternal(target) {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, l.line, target, resolved)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(resolved, ".md") {
				t.Errorf("%s:%d: link %q: anchors are checked in markdown files only", file, l.line, target)
				continue
			}
			if !slugsOf(resolved)[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", file, l.line, target, resolved, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the parser is broken")
	}
}

// TestQuickstartInSync checks that README.md's quick start and the package doc's are
// the body of Example_quickstart, which the compiler checks.
func TestQuickstartInSync(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "func Example_quickstart() {\n")
	if start < 0 {
		t.Fatal("example_test.go: no Example_quickstart")
	}
	s = s[start+len("func Example_quickstart() {\n"):]
	end := strings.Index(s, "\n}\n")
	if end < 0 {
		t.Fatal("example_test.go: Example_quickstart has no end")
	}
	var want []string
	for _, line := range strings.Split(s[:end], "\n") {
		want = append(want, strings.TrimPrefix(line, "\t"))
	}
	example := strings.Join(want, "\n")

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	r := string(readme)
	i := strings.Index(r, "## Quick start")
	if i < 0 {
		t.Fatal("README.md: no Quick start section")
	}
	r = r[i:]
	j := strings.Index(r, "```go\n")
	if j < 0 {
		t.Fatal("README.md: Quick start has no go block")
	}
	r = r[j+len("```go\n"):]
	k := strings.Index(r, "\n```")
	if k < 0 {
		t.Fatal("README.md: Quick start's go block has no end")
	}
	if got := r[:k]; got != example {
		t.Errorf("README.md's quick start differs from Example_quickstart's body:\n--- README\n%s\n--- example\n%s", got, example)
	}

	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	d := string(doc)
	i = strings.Index(d, "// # Quick start\n")
	if i < 0 {
		t.Fatal("doc.go: no Quick start section")
	}
	var block []string
	inBlock := false
	for _, line := range strings.Split(d[i:], "\n")[1:] {
		switch {
		case strings.HasPrefix(line, "//\t"):
			inBlock = true
			block = append(block, strings.TrimPrefix(line, "//\t"))
		case line == "//" && inBlock:
			block = append(block, "")
		case inBlock:
			goto done
		}
	}
done:
	got := strings.TrimRight(strings.Join(block, "\n"), "\n")
	if got != example {
		t.Errorf("doc.go's quick start differs from Example_quickstart's body:\n--- doc.go\n%s\n--- example\n%s", got, example)
	}
}

// TestQuickstartPostgresInSync: every line of the README's PostgreSQL variant of the
// quick start is in Example_quickstartPostgres (which go vet compiles).
func TestQuickstartPostgresInSync(t *testing.T) {
	src, err := os.ReadFile("example_postgres_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	r := string(readme)
	i := strings.Index(r, "these lines differ:\n\n```go\n")
	if i < 0 {
		t.Fatal("README.md: no PostgreSQL variant of the quick start")
	}
	r = r[i+len("these lines differ:\n\n```go\n"):]
	r = r[:strings.Index(r, "\n```")]
	for _, line := range strings.Split(r, "\n") {
		code, _, _ := strings.Cut(line, " //")
		code = strings.TrimPrefix(strings.TrimSpace(code), "import ") // an import line: in the import block
		if !strings.Contains(string(src), code) {
			t.Errorf("README's PostgreSQL line %q is not in Example_quickstartPostgres", code)
		}
	}
}

type mdLink struct {
	target string
	line   int
}

var (
	inlineLink    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	referenceLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(\S+)`)
	codeSpan      = regexp.MustCompile("`+[^`]*`+")
)

// markdownLinks returns the link targets of md outside fenced code blocks and code spans.
func markdownLinks(md string) []mdLink {
	var links []mdLink
	fence := ""
	for n, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := referenceLink.FindStringSubmatch(line); m != nil {
			links = append(links, mdLink{m[1], n + 1})
			continue
		}
		// A link's text may be a code span ([`x`](x)): keep those, drop other spans.
		text := inlineLink.ReplaceAllStringFunc(line, func(s string) string {
			return strings.ReplaceAll(s, "`", "")
		})
		text = codeSpan.ReplaceAllString(text, "")
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			links = append(links, mdLink{m[1], n + 1})
		}
	}
	return links
}

func isExternal(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	scheme, _, ok := strings.Cut(target, ":")
	if !ok || strings.ContainsAny(scheme, "/#.") {
		return false
	}
	return true // http:, https:, mailto:, ...
}

// headingSlugs returns the anchors GitHub gives md's headings: the heading text without
// markdown, lower-cased, every character but letters, digits, spaces, '-' and '_'
// dropped, spaces turned into '-'; a repeated slug gets -1, -2, ...
func headingSlugs(md string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if text == "" || text[0] != ' ' || len(line)-len(text) > 6 {
			continue
		}
		slug := githubSlug(text)
		if n, dup := seen[slug]; dup {
			seen[slug] = n + 1
			slug += "-" + strconv.Itoa(n+1)
		} else {
			seen[slug] = 0
		}
		slugs[slug] = true
	}
	return slugs
}

var linkInHeading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func githubSlug(heading string) string {
	h := strings.TrimSpace(heading)
	h = strings.TrimRight(h, "#")
	h = strings.TrimSpace(h)
	h = linkInHeading.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	for in, want := range map[string]string{
		" Two commands": "two-commands",
		" `outboxctl`":  "outboxctl",
		" Publisher cost (`BenchmarkPublishCommit`)":                 "publisher-cost-benchmarkpublishcommit",
		" Compared with Watermill's forwarder over watermill-sql":    "compared-with-watermills-forwarder-over-watermill-sql",
		" 4. Latency commit → publish (one message per transaction)": "4-latency-commit--publish-one-message-per-transaction",
		" Figures 2026-12-01":  "figures-2026-12-01",
		" [Unreleased]":        "unreleased",
		" MySQL/MariaDB":       "mysqlmariadb",
		" Added ":              "added",
		" snake_case heading ": "snake_case-heading",
	} {
		if got := githubSlug(in); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", in, got, want)
		}
	}
	if s := headingSlugs("# A\n## A\n```\n# not a heading\n```\n### A\n"); !s["a"] || !s["a-1"] || !s["a-2"] || s["not-a-heading"] {
		t.Errorf("headingSlugs: %v", s)
	}
}

// TestDocsCountFiveTables: every place that counts the tables says five and names the
// inbox's two, and says how to drop them, as CreateScript creates them.
func TestDocsCountFiveTables(t *testing.T) {
	if n := len((outbox.Options{}).TableNames()); n != 5 {
		t.Fatalf("Options.TableNames has %d tables; the docs say five", n)
	}
	for _, f := range []string{"mysql/doc.go", "postgres/doc.go", "sqlserver/doc.go", "docs/operations.md", "inbox/doc.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "//", "")), " ")
		for _, want := range []string{"five tables", "inbox_lease"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s does not say %q", f, want)
			}
		}
		if f != "inbox/doc.go" && !strings.Contains(strings.ToLower(s), "drop") {
			t.Errorf("%s does not say how to drop the tables", f)
		}
		for _, stale := range []string{"three tables", "three CREATE TABLE"} {
			if strings.Contains(s, stale) {
				t.Errorf("%s still says %q", f, stale)
			}
		}
	}
}

// TestReadmeListsEveryExample: the README links every example directory.
func TestReadmeListsEveryExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("_examples")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "examplestest" {
			continue
		}
		if !strings.Contains(string(readme), "(_examples/"+e.Name()+")") {
			t.Errorf("README.md does not link _examples/%s", e.Name())
		}
	}
}
