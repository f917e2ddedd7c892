// Package exetrim releases the pages of the running executable that a
// process mapped in only to start.
//
// Linux maps an executable's code and constant data on demand, but not
// page by page: a fault maps the pages around it that are in the page
// cache too (64 KiB by default). A Go program runs the init of every
// package it links before main, so by the time it serves, most of its
// read-only pages are mapped: 17 of the 21 MB proxy binary, where an
// idle proxy touches about 3 MiB again. Release drops the process's
// mappings of those pages; the ones it still runs come back at their
// next touch, from the page cache, and the rest stay in the page cache
// (shared with every other process running the same file) without being
// counted in this process's resident memory.
//
// Only read-only private mappings of the executable itself that hold
// nothing but the file's content are released (no anonymous or swapped
// page: a position-independent executable's relocated data is read-only
// too, but its pages are copies the loader wrote), so dropping them loses
// nothing. Data and heap are never touched.
//
// Schedule says when: once start-up has settled, and again after each
// spell of work followed by idle (the proxy: a second after its first
// policy version, and a minute without a decision after traffic).
package exetrim
