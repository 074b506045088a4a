// Package browsertest drives the dashboard (package dashboard) in Debian's headless
// Chromium through chromedp, over MariaDB and PostgreSQL with seeded rows, as a person
// would use it. It is a module of its own so that the library's go.mod gains no browser
// driver. scripts/chromium installs the browser; OUTBOX_CHROMIUM names another one.
// With OUTBOX_SCREENSHOTS=dir the test also writes the screenshots of docs/ there
// (make screenshots).
package browsertest
