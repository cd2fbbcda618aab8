// Package docs holds the user documentation: the pages next to this file,
// the README at the repository's root, and the tests that keep them short,
// complete and linked. It owns no code; it reads the config package's
// schema to know which keys the pages must document, and nothing else of
// ringgate.
package docs
