// Package watermillonce runs each Watermill message's job once, whatever the
// number of copies delivered, with a jobonce Guard.
//
//	import watermillonce "github.com/jobonce/jobonce/adapters/watermill"
package watermillonce
