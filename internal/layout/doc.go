// Package layout holds tests of the repository's shape rather than its
// behaviour: the stores stand on core/driver alone; the internal packages
// core uses stand beneath it, and calls inside core go Guard → Claim →
// store; each store and adapter brings its users its own framework and no
// other, and go.work lists every module; test files and tests are named for
// what they test. It has no code of its own.
package layout
