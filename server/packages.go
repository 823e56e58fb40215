package server

import (
	"errors"

	"github.com/codeexec/codeexec/sandbox/packages"
)

// Packages is what the server needs of the packages layer
// (sandbox/packages.Runner): what sandbox_info reports.
type Packages interface {
	Info() *packages.Info
}

// packagesParam declares the packages argument of code_execute and
// session_create; set receives the specs checked and normalized for the
// language decoded before it (lang), or refuses them with an *ArgError.
func packagesParam(o *Options, lang *string, set func([]string)) param {
	return param{
		name: "packages",
		description: "Packages to install before the program runs (optional, and only where sandbox_info says packages are enabled): " +
			"pip requirement specifiers for python (\"requests==2.31.0\", \"numpy>=1.26,<2\"), npm specs for javascript (\"lodash@4.17.21\"). " +
			"Names and versions only: no URLs, paths, VCS links or options. They come from the operator's index; the program itself keeps no network access. Pin versions: an identical list is reused from the cache.",
		jsonType: "array",
		expected: `an array of package specs such as ["requests==2.31.0"]`,
		schema:   map[string]any{"items": map[string]any{"type": "string"}, "maxItems": packages.MaxSpecs},
		set: func(v any) error {
			list := v.([]any)
			if len(list) == 0 {
				return nil
			}
			if o.Packages == nil {
				return argErr("packages are turned off on this server (CODE_EXEC_PACKAGES=false): use what is installed (sandbox_info lists it), or ask the operator to turn packages on")
			}
			specs := make([]string, 0, len(list))
			for i, item := range list {
				s, ok := item.(string)
				if !ok {
					return argErr("packages[%d] must be a string such as \"requests==2.31.0\", not %s", i, jsonType(item))
				}
				specs = append(specs, s)
			}
			info := o.Packages.Info()
			switch {
			case *lang == "python" && info.PipIndexURL == "":
				return argErr("python packages are not offered here: the operator named no pip index (CODE_EXEC_PIP_INDEX_URL)")
			case *lang == "javascript" && info.NpmRegistry == "":
				return argErr("javascript packages are not offered here: the operator named no npm registry (CODE_EXEC_NPM_REGISTRY)")
			}
			norm, err := packages.Parse(*lang, specs)
			if err != nil {
				return argErr("%s; name packages from the index with versions, such as %s", err.Error(), map[string]string{"python": `"requests==2.31.0"`, "javascript": `"lodash@4.17.21"`}[*lang])
			}
			set(norm)
			return nil
		},
	}
}

// packagesErrorMessage turns a failed install into one message for the
// model, or returns false for another error.
func packagesErrorMessage(err error) (string, bool) {
	var ie *packages.InstallError
	switch {
	case errors.As(err, &ie):
		return "The packages could not be installed, so the code did not run: " + ie.Tool + " " + ie.Reason +
			". Check the names and versions (the index may not have them). " + ie.Tool + "'s output ends with:\n" + ie.Output, true
	case errors.Is(err, packages.ErrTooLarge):
		return "The packages could not be installed, so the code did not run: " + err.Error() + ". Ask for fewer or smaller packages.", true
	case errors.Is(err, packages.ErrInstall), errors.Is(err, packages.ErrInvalidSpec):
		return "The packages could not be installed, so the code did not run: " + err.Error() + ".", true
	}
	return "", false
}
