// Package layout holds tests of the module's shape rather than its
// behaviour: the stores stand on core/driver alone, and test files and tests
// are named for what they test. It has no code of its own.
package layout
