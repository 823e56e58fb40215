package artifacts

import (
	"bytes"
	"encoding/binary"
)

// sniffBinary is the binary part of the WHATWG MIME sniffing algorithm, as
// net/http's DetectContentType implements it: the image, audio, video,
// font and archive signatures, in the same order. It returns "" where
// DetectContentType would find text or nothing (text is Classify's to
// tell). The run supervisor classifies artifacts and starts with every
// run, so it must not link net/http, whose place in Go's initialisation
// order delays every start (TestHelpersStayLight); TestSniffMatchesNetHTTP
// checks that both agree.
func sniffBinary(data []byte) string {
	if len(data) > 512 {
		data = data[:512]
	}
	for _, s := range binarySignatures {
		if len(data) < len(s.pat) {
			continue
		}
		match := true
		for i, p := range s.pat {
			m := byte(0xFF)
			if s.mask != nil {
				m = s.mask[i]
			}
			if data[i]&m != p {
				match = false
				break
			}
		}
		if match {
			return s.ct
		}
		if s.ct == "audio/wave" && isMP4(data) {
			// video/mp4 comes right after audio/wave in the algorithm.
			return "video/mp4"
		}
	}
	return ""
}

// binarySignature is a byte pattern; mask nil means every byte must match.
type binarySignature struct {
	pat, mask []byte
	ct        string
}

var binarySignatures = []binarySignature{
	{pat: []byte("%PDF-"), ct: "application/pdf"},
	{pat: []byte("%!PS-Adobe-"), ct: "application/postscript"},
	{pat: []byte("\x00\x00\x01\x00"), ct: "image/x-icon"},
	{pat: []byte("\x00\x00\x02\x00"), ct: "image/x-icon"},
	{pat: []byte("BM"), ct: "image/bmp"},
	{pat: []byte("GIF87a"), ct: "image/gif"},
	{pat: []byte("GIF89a"), ct: "image/gif"},
	{pat: []byte("RIFF\x00\x00\x00\x00WEBPVP"), mask: []byte("\xFF\xFF\xFF\xFF\x00\x00\x00\x00\xFF\xFF\xFF\xFF\xFF\xFF"), ct: "image/webp"},
	{pat: []byte("\x89PNG\x0D\x0A\x1A\x0A"), ct: "image/png"},
	{pat: []byte("\xFF\xD8\xFF"), ct: "image/jpeg"},
	{pat: []byte("FORM\x00\x00\x00\x00AIFF"), mask: []byte("\xFF\xFF\xFF\xFF\x00\x00\x00\x00\xFF\xFF\xFF\xFF"), ct: "audio/aiff"},
	{pat: []byte("ID3"), ct: "audio/mpeg"},
	{pat: []byte("OggS\x00"), ct: "application/ogg"},
	{pat: []byte("MThd\x00\x00\x00\x06"), ct: "audio/midi"},
	{pat: []byte("RIFF\x00\x00\x00\x00AVI "), mask: []byte("\xFF\xFF\xFF\xFF\x00\x00\x00\x00\xFF\xFF\xFF\xFF"), ct: "video/avi"},
	{pat: []byte("RIFF\x00\x00\x00\x00WAVE"), mask: []byte("\xFF\xFF\xFF\xFF\x00\x00\x00\x00\xFF\xFF\xFF\xFF"), ct: "audio/wave"},
	{pat: []byte("\x1A\x45\xDF\xA3"), ct: "video/webm"},
	{pat: append(make([]byte, 34), "LP"...), mask: append(make([]byte, 34), 0xFF, 0xFF), ct: "application/vnd.ms-fontobject"},
	{pat: []byte("\x00\x01\x00\x00"), ct: "font/ttf"},
	{pat: []byte("OTTO"), ct: "font/otf"},
	{pat: []byte("ttcf"), ct: "font/collection"},
	{pat: []byte("wOFF"), ct: "font/woff"},
	{pat: []byte("wOF2"), ct: "font/woff2"},
	{pat: []byte("\x1F\x8B\x08"), ct: "application/x-gzip"},
	{pat: []byte("PK\x03\x04"), ct: "application/zip"},
	{pat: []byte("Rar!\x1A\x07\x00"), ct: "application/x-rar-compressed"},
	{pat: []byte("Rar!\x1A\x07\x01\x00"), ct: "application/x-rar-compressed"},
	{pat: []byte("\x00\x61\x73\x6D"), ct: "application/wasm"},
}

// isMP4 is the signature for MP4 (WHATWG MIME sniffing, 6.2.1).
func isMP4(data []byte) bool {
	if len(data) < 12 {
		return false
	}
	boxSize := int(binary.BigEndian.Uint32(data[:4]))
	if len(data) < boxSize || boxSize%4 != 0 || !bytes.Equal(data[4:8], []byte("ftyp")) {
		return false
	}
	for st := 8; st < boxSize; st += 4 {
		if st == 12 {
			continue // the major brand's version
		}
		if bytes.Equal(data[st:st+3], []byte("mp4")) {
			return true
		}
	}
	return false
}
