package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// fileItemSchema is the JSON Schema of one element of code_execute's files.
var fileItemSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"path": map[string]any{
			"type":        "string",
			"description": `Where the file goes, relative to the program's working directory, with "/" between folders (for example "data.csv" or "input/2024.json"); no "..", no absolute path.`,
		},
		"content": map[string]any{
			"type":        "string",
			"description": "The file's content: text, or the bytes in standard base64 when encoding is base64.",
		},
		"encoding": map[string]any{
			"type":        "string",
			"enum":        artifacts.Encodings,
			"default":     artifacts.EncodingUTF8,
			"description": "utf-8 (the default) for text, base64 for binary files.",
		},
	},
	"required":             []string{"path", "content"},
	"additionalProperties": false,
}

// filesParam declares code_execute's files argument; set receives the
// files as sent, each one's fields checked for their types.
func filesParam(set func([]artifacts.File) error) param {
	return param{
		name: "files",
		description: "Files to write into the program's working directory before it runs (optional), for example a CSV to analyse. " +
			"Files the program creates or changes there come back: images as images, small text files embedded, others as resource links (see sandbox_info for the caps).",
		jsonType: "array",
		expected: `an array of files such as [{"path": "data.csv", "content": "a,b\n1,2\n"}]`,
		schema:   map[string]any{"items": fileItemSchema},
		set: func(v any) error {
			list := v.([]any)
			files := make([]artifacts.File, 0, len(list))
			for i, item := range list {
				m, ok := item.(map[string]any)
				if !ok {
					return argErr("files[%d] must be an object with path and content, not %s", i, jsonType(item))
				}
				var f artifacts.File
				for k, val := range m {
					s, isString := val.(string)
					switch {
					case !slices.Contains([]string{"path", "content", "encoding"}, k):
						return argErr("files[%d] has the unknown field %q: a file takes path, content and encoding", i, truncateRunes(k, 40))
					case k == "encoding" && val == nil:
					case !isString:
						return argErr("files[%d].%s must be a string, not %s", i, k, jsonType(val))
					case k == "path":
						f.Path = s
					case k == "content":
						f.Content = s
					default:
						f.Encoding = s
					}
				}
				if _, ok := m["path"]; !ok {
					return argErr("files[%d] has no path: give each file a path such as \"data.csv\"", i)
				}
				if _, ok := m["content"]; !ok {
					return argErr("files[%d] %q has no content: send its text, or its bytes in base64 with \"encoding\": \"base64\"", i, truncateRunes(f.Path, 80))
				}
				files = append(files, f)
			}
			return set(files)
		},
	}
}

// filesErrorMessage is the sentence for a file that artifacts.Decode or a
// runner refused, naming the setting when a cap refused it.
func filesErrorMessage(err error) string {
	var fe *artifacts.FileError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	msg := strings.TrimSuffix(fe.Error(), ".")
	switch fe.Cap {
	case artifacts.CapFiles:
		msg += " (CODE_EXEC_MAX_FILES)"
	case artifacts.CapFileBytes, artifacts.CapTotalBytes:
		msg += " (CODE_EXEC_MAX_FILES_BYTES)"
	}
	return msg
}

// ArtifactOutput is one file that a run created or changed, in
// code_execute's structuredContent.
type ArtifactOutput struct {
	Path     string `json:"path" jsonschema:"Relative to the working directory."`
	Size     int64  `json:"size" jsonschema:"Bytes."`
	MIMEType string `json:"mime_type"`
	SHA256   string `json:"sha256" jsonschema:"Hex SHA-256 of the content."`
	// URI is where resources/read serves it, for CODE_EXEC_ARTIFACT_TTL;
	// empty when it could not be kept.
	URI string `json:"uri,omitempty" jsonschema:"codeexec://runs/<run id>/<path>, served by resources/read; absent when the file could not be kept."`
}

// resourceLinkSince is the first protocol version with resource_link
// content; older clients get a text content that names the URI instead.
const resourceLinkSince = "2025-06-18"

// resourceLinks reports whether the client of ctx's request takes
// resource_link content.
func resourceLinks(ctx context.Context) bool {
	v := mcpserver.RequestProtocolVersion(ctx)
	return v == "" || v >= resourceLinkSince
}

// artifactResults keeps a run's artifacts in the store, for the client
// session that asked, and returns their listing for structuredContent, the
// contents that carry them to the model (images, embedded text, links), and
// a note about what was left out or not kept ("" when nothing was).
func (s *Server) artifactResults(ctx context.Context, c *artifacts.Collection) ([]ArtifactOutput, []mcp.Content, string) {
	if c == nil {
		return nil, nil, ""
	}
	notes := []string{c.Note()}
	arts := c.Artifacts
	runID := s.opts.Replicas.Prefix() + artifacts.NewRunID()
	if s.opts.Store != nil && len(arts) > 0 {
		if kept := s.opts.Store.Put(runID, s.owner(ctx), arts); kept < len(arts) {
			notes = append(notes, fmt.Sprintf("%d of the files could not be kept for resources/read (CODE_EXEC_ARTIFACT_STORE_BYTES is full) and are only listed.", len(arts)-kept))
		}
	}
	links := resourceLinks(ctx)
	list := make([]ArtifactOutput, 0, len(arts))
	var content []mcp.Content
	for _, a := range arts {
		list = append(list, ArtifactOutput{Path: a.Path, Size: a.Size, MIMEType: a.MIMEType, SHA256: a.SHA256, URI: a.URI})
		uri := a.URI
		if uri == "" {
			uri = artifacts.URI(runID, a.Path)
		}
		switch {
		case a.Kind == artifacts.KindImage:
			content = append(content, mcp.NewImageContent(base64.StdEncoding.EncodeToString(a.Data), a.MIMEType))
		case a.Kind == artifacts.KindText:
			content = append(content, mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: uri, MIMEType: a.MIMEType, Text: string(a.Data)}))
		case a.URI == "":
			// Not kept: listed only.
		case links:
			l := mcp.NewResourceLink(a.URI, a.Path, fmt.Sprintf("%s made by the run (%s); resources/read serves it for %s", a.Path, artifacts.FormatBytes(a.Size), s.ttl()), a.MIMEType)
			size := a.Size
			l.Size = &size
			content = append(content, l)
		default:
			content = append(content, mcp.NewTextContent(fmt.Sprintf("The run made %s (%s, %s): read it with resources/read at %s within %s.", a.Path, a.MIMEType, artifacts.FormatBytes(a.Size), a.URI, s.ttl())))
		}
	}
	return list, content, strings.TrimSpace(strings.Join(notes, " "))
}

// ttl says how long artifacts are served.
func (s *Server) ttl() string {
	if s.opts.Store == nil {
		return "a while"
	}
	return s.opts.Store.TTL().String()
}

// artifactTemplate is the resource template that resources/read serves
// artifacts, and the whole output of summarised runs, under.
func artifactTemplate() mcp.ResourceTemplate {
	return mcp.NewResourceTemplate(artifacts.URITemplate, "run artifacts",
		mcp.WithTemplateTitle("Files and output of code_execute runs"),
		mcp.WithTemplateDescription("A file that a code_execute run created or changed in its working directory, or the whole stdout or stderr of a run whose result showed only its head and tail, served for a while after the run (CODE_EXEC_ARTIFACT_TTL) to the client session that ran it. code_execute's results link to them."))
}

// readArtifact serves resources/read for an artifact URI.
func (s *Server) readArtifact(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	a, err := s.opts.Store.Get(req.Params.URI, s.owner(ctx))
	if err != nil {
		return nil, err
	}
	if artifacts.Classify(a.Path, a.Data).Text {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: a.URI, MIMEType: a.MIMEType, Text: string(a.Data)}}, nil
	}
	return []mcp.ResourceContents{mcp.BlobResourceContents{URI: a.URI, MIMEType: a.MIMEType, Blob: base64.StdEncoding.EncodeToString(a.Data)}}, nil
}
