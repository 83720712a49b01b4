package examples_test

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheLifecyclePictureIsWhatDotMakesOfItsSource: docs/lifecycle.svg names
// every state and step of a key, and, where Graphviz's dot is installed
// (Debian's graphviz; scripts/test.sh does not need it), holds the same
// titles and labels as dot makes of docs/lifecycle.dot now, so the picture
// cannot fall behind its source. Positions are not compared: they follow
// the fonts and the version of Graphviz.
//
//	dot -Tsvg docs/lifecycle.dot -o docs/lifecycle.svg
func TestTheLifecyclePictureIsWhatDotMakesOfItsSource(t *testing.T) {
	committed, err := os.ReadFile("../docs/lifecycle.svg")
	require.NoError(t, err)
	text := strings.Join(svgText(t, committed), "\n")
	for _, want := range []string{"absent", "claimed", "heartbeat", "done marker", "expired", "released",
		"lease lapses", "a later copy claims", "waits for the", "comes back later", "duplicate"} {
		require.Contains(t, text, want)
	}
	semantics, err := os.ReadFile("../docs/semantics.md")
	require.NoError(t, err)
	require.Contains(t, string(semantics), "](lifecycle.svg)", "docs/semantics.md shows the picture")

	dot, err := exec.LookPath("dot")
	if err != nil {
		t.Log("dot is not installed (Debian's graphviz): the picture is not compared with its source")
		return
	}
	out, err := exec.Command(dot, "-Tsvg", "../docs/lifecycle.dot").Output()
	require.NoError(t, err)
	require.Equal(t, svgText(t, out), svgText(t, committed),
		"docs/lifecycle.svg is not what dot makes of docs/lifecycle.dot: dot -Tsvg docs/lifecycle.dot -o docs/lifecycle.svg")
}

// svgText returns the text of an SVG's title and text elements, in order.
func svgText(t *testing.T, svg []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	d.Strict = false // the DOCTYPE names a DTD the decoder does not read
	var texts []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return texts
		}
		require.NoError(t, err)
		if start, ok := tok.(xml.StartElement); ok && (start.Name.Local == "title" || start.Name.Local == "text") {
			var s string
			require.NoError(t, d.DecodeElement(&s, &start))
			texts = append(texts, s)
		}
	}
}
