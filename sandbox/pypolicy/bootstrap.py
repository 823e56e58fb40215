# codeexec restricted-Python bootstrap (sandbox/pypolicy).
#
# The Go side appends one line that calls _codeexec_policy(payload), where
# payload is base64 of NUL-separated fields: a per-run nonce, the caps, the
# allowed imports (comma-separated) and last the user's program. This file
# runs as the main program inside the sandbox, in the interpreter that then
# runs the user's program:
#
#  1. parse the program into its syntax tree (compile with PyCF_ONLY_AST; the
#     parser normalises identifiers to NFKC, so "ｅval" is the name eval), cap
#     its size and node count;
#  2. walk the tree and refuse what the policy forbids, with the rule and the
#     line;
#  3. rewrite every ".format"/".format_map" attribute read into a guarded
#     lookup (format strings can be built at run time);
#  4. run the compiled program in a fresh globals dict with curated builtins:
#     a guarded __import__ that hands out filtered module proxies, guarded
#     getattr/setattr/delattr/hasattr, no open/eval/exec/compile/globals/
#     locals/vars/breakpoint; gadgets of the allowed modules are guarded in
#     place (operator.attrgetter/methodcaller, functools.update_wrapper,
#     functools.singledispatch's register, enum's _convert_,
#     collections.UserString.format, string.Formatter.get_field).
#
# The bootstrap imports only standard modules, and only before the program
# runs but for traceback, which it imports only to print an error (no run
# that ends well pays for it): python starts isolated (-I: no script folder,
# no PYTHON* variables, no user site), and a run's package folder is put on
# sys.path after the standard library (see sandbox/python.go), so neither
# the run's files nor its packages can stand in for a module imported here.
# The program reaches neither sys nor the import system to change that.
#
# A refusal writes one line "<marker> <JSON>" on stderr and exits with status
# 120 at once (os._exit: user code cannot catch it). Nothing of this file is
# reachable from the program without a dunder attribute or a frame walk,
# both of which the policy refuses.


def _codeexec_policy(payload):
    import _ast as ast
    import _string
    import binascii
    import builtins
    import collections
    import enum
    import functools
    import importlib
    import linecache
    import operator
    import os
    import string
    import sys
    import types
    import unicodedata

    boot_globals = globals()
    nonce, max_nodes, max_source, allowed_names, source = binascii.a2b_base64(payload).split(b"\0", 4)
    max_nodes, max_source = int(max_nodes), int(max_source)
    allowed_names = [n for n in allowed_names.decode().split(",") if n]
    allowed = frozenset(allowed_names)
    allowed_list = ", ".join(allowed_names) or "none"
    marker = "codeexec-policy:" + nonce.decode()
    filename = "main.py"
    exit_status = 120

    real_getattr, real_setattr, real_delattr = builtins.getattr, builtins.setattr, builtins.delattr
    real_exec, real_compile = builtins.exec, builtins.compile
    str_format, str_format_map = str.format, str.format_map
    user_globals = {}

    def user_line():
        f = sys._getframe(1)
        while f is not None and f.f_globals is not user_globals:
            f = f.f_back
        return f.f_lineno if f is not None else 0

    def refuse(rule, detail, line=None):
        if line is None:
            line = user_line()
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except BaseException:
                pass
        msg = '{"rule": %s, "line": %d, "detail": %s}' % (json_str(rule), line, json_str(detail))
        os.write(2, ("\n" + marker + " " + msg + "\n").encode("utf-8", "replace"))
        os._exit(exit_status)

    # JSON's escapes of a string's characters: the quote, the backslash and
    # the control characters (json.dumps(s, ensure_ascii=False) without the
    # json module, which no run needs otherwise).
    json_escapes = {i: "\\u%04x" % i for i in range(32)}
    json_escapes.update({ord('"'): '\\"', ord("\\"): "\\\\", 8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"})

    def json_str(s):
        return '"' + str.translate(s, json_escapes) + '"'

    def q(s):
        s = s if type(s) is str else "<not a str>"
        if len(s) > 60:
            s = s[:60] + "..."
        return json_str(s)

    # --- names and attributes ----------------------------------------------

    banned_names = frozenset((
        "open", "eval", "exec", "compile", "globals", "locals", "vars", "breakpoint",
        "help", "license", "credits", "copyright", "__import__", "__builtins__",
        "__loader__", "__spec__", "__build_class__",
    ))
    # Dunder names a program may read; others are refused.
    readable_dunders = frozenset(("__name__", "__doc__", "__file__", "__debug__"))
    # Dunder attributes a program may read: strings that name and describe
    # things (type(self).__name__), which lead nowhere.
    readable_dunder_attrs = frozenset(("__name__", "__qualname__", "__doc__"))
    # Dunder names a class body may not assign.
    # (__annotations__: the standard library evaluates the strings in it.)
    unassignable_dunders = frozenset(("__builtins__", "__class__", "__dict__", "__bases__", "__mro__", "__annotations__"))
    hierarchy_attrs = frozenset(("__subclasses__", "__mro__", "__bases__", "__base__", "mro"))
    frame_attrs = frozenset((
        "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended",
        "cr_frame", "cr_code", "cr_await", "cr_origin", "cr_running", "cr_suspended",
        "ag_frame", "ag_code", "ag_await", "ag_running",
        "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_lasti", "f_lineno",
        "f_trace", "f_trace_lines", "f_trace_opcodes",
        "tb_frame", "tb_next", "tb_lasti", "tb_lineno",
        "co_code", "co_consts", "co_names", "co_varnames", "co_cellvars", "co_freevars",
        "co_filename", "co_name", "co_qualname", "co_firstlineno", "co_lnotab",
        "co_linetable", "co_exceptiontable", "co_flags", "co_nlocals", "co_stacksize",
        "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_lines", "co_positions",
        "func_globals", "func_code", "func_closure", "im_func", "im_self", "cell_contents",
    ))
    format_attrs = frozenset(("format", "format_map"))
    # The classes that a class pattern matches as a whole (case int(n)):
    # their one positional sub-pattern reads no attribute. For any other
    # class, positional sub-patterns read the attributes that the class's
    # __match_args__ names, which a metaclass controls at run time.
    self_matching = frozenset(("bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"))

    def is_dunder(name):
        return len(name) > 4 and name.startswith("__") and name.endswith("__")

    def attr_problem(name):
        """Why a (statically written) attribute name is refused, or None."""
        if name in hierarchy_attrs:
            return "class-hierarchy", "the attribute %s reaches the class hierarchy" % q(name)
        if name in frame_attrs:
            return "frame-internals", "the attribute %s reaches frame, generator or code internals" % q(name)
        if is_dunder(name):
            return "dunder-attribute", "the dunder attribute %s is not accessible" % q(name)
        return None

    def public_problem(name, what):
        """Why a name given at run time (getattr, format fields, attrgetter)
        is refused: it must be a plain public identifier."""
        if type(name) is not str:
            return "attribute-name", "%s needs a plain str attribute name" % what
        norm = unicodedata.normalize("NFKC", name)
        if not name.isidentifier() or name.startswith("_") or norm.startswith("_"):
            return "attribute-name", "%s may only use plain public attribute names, not %s" % (what, q(name))
        for n in (name, norm):
            p = attr_problem(n)
            if p:
                return p[0], "%s: %s" % (what, p[1])
        return None

    def check_public(name, what):
        p = public_problem(name, what)
        if p:
            refuse(p[0], p[1])

    # --- format strings ----------------------------------------------------

    def format_problem(fmt, depth=0):
        """Why a format string is refused, or None. Malformed strings are
        left to str.format, which raises before it reaches a bad field."""
        try:
            for _, field, spec, _ in _string.formatter_parser(fmt):
                if field:
                    _, rest = _string.formatter_field_name_split(field)
                    for is_attr, key in rest:
                        if is_attr:
                            p = public_problem(key, "the format field {%s}" % field[:40])
                            if p:
                                return "format-field", p[1]
                if spec and depth < 3:
                    p = format_problem(spec, depth + 1)
                    if p:
                        return p
        except ValueError:
            return None
        return None

    def check_format(fmt):
        p = format_problem(fmt)
        if p:
            refuse(p[0], p[1])

    def safe_str_format(fmt, *args, **kwargs):
        fmt = str.__str__(fmt)
        check_format(fmt)
        return str_format(fmt, *args, **kwargs)

    def safe_str_format_map(fmt, mapping):
        fmt = str.__str__(fmt)
        check_format(fmt)
        return str_format_map(fmt, mapping)

    def bound(fn, s):
        def method(*args, **kwargs):
            return fn(s, *args, **kwargs)
        return method

    def wrap_value(v):
        """Replace str.format/format_map, bound or not, by guarded versions."""
        if v is str_format:
            return safe_str_format
        if v is str_format_map:
            return safe_str_format_map
        if type(v) is types.BuiltinMethodType:
            name = real_getattr(v, "__name__", None)
            owner = real_getattr(v, "__self__", None)
            if name in format_attrs and isinstance(owner, str):
                return bound(safe_str_format if name == "format" else safe_str_format_map, owner)
        return v

    def attr_hook(obj, name):
        # The rewritten form of obj.format / obj.format_map.
        return wrap_value(real_getattr(obj, name))

    # --- builtins ----------------------------------------------------------

    def safe_getattr(obj, name, *default):
        check_public(name, "getattr")
        return wrap_value(real_getattr(obj, name, *default))

    def safe_hasattr(obj, name):
        check_public(name, "hasattr")
        return builtins.hasattr(obj, name)

    def safe_setattr(obj, name, value):
        check_public(name, "setattr")
        real_setattr(obj, name, value)

    def safe_delattr(obj, name):
        check_public(name, "delattr")
        real_delattr(obj, name)

    def safe_exit(code=None):
        raise SystemExit(code)

    # --- imports -----------------------------------------------------------

    proxies = {}
    building = set()

    def proxy(modname):
        p = proxies.get(modname)
        if p is None:
            p = types.ModuleType(modname)
            proxies[modname] = p
        if modname in building:
            return p
        building.add(modname)
        try:
            real = sys.modules[modname]
            d = p.__dict__
            d["__doc__"] = real_getattr(real, "__doc__", None)
            for n in dir(real):
                if n.startswith("_"):
                    continue
                try:
                    v = real_getattr(real, n)
                except AttributeError:
                    continue
                if isinstance(v, types.ModuleType):
                    vn = real_getattr(v, "__name__", "")
                    if type(vn) is not str or vn.partition(".")[0] not in allowed or vn not in sys.modules:
                        continue
                    v = proxy(vn)
                d[n] = v
            d["__getattr__"] = missing(modname)
            names = real_getattr(real, "__all__", None)
            if isinstance(names, (list, tuple)):
                d["__all__"] = [n for n in names if type(n) is str and n in d and not n.startswith("_")]
        finally:
            building.discard(modname)
        return p

    def missing(modname):
        # A name the proxy leaves out is refused with a reason, not a bare
        # AttributeError: a module outside the allowed imports, or a
        # private name.
        def __getattr__(name):
            real = sys.modules.get(modname)
            if type(name) is str and real is not None and builtins.hasattr(real, name):
                what = "%s.%s" % (modname, name)
                if name.startswith("_"):
                    refuse("module-attribute", "the private name %s is not available" % q(what))
                refuse("module-attribute", "%s is not available: it is a module outside the allowed imports (%s)" % (q(what), allowed_list))
            raise AttributeError("module %r has no attribute %r" % (modname, name))
        return __getattr__

    def safe_import(name, globals=None, locals=None, fromlist=(), level=0):
        if type(fromlist) is list and not fromlist and not level and type(name) is str:
            # The interpreter's own imports from C (PyImport_Import: time
            # for strftime, _strptime for strptime) pass an empty list, which
            # no import statement does; the module goes to C, not to the
            # program.
            return importlib.import_module(name)
        if level:
            refuse("import", "relative imports are not allowed")
        if type(name) is not str:
            refuse("import", "imports need a plain str module name")
        top = name.partition(".")[0]
        if top not in allowed:
            refuse("import", "the module %s is not among the allowed imports (%s)" % (q(top), allowed_list))
        for part in name.split("."):
            if part.startswith("_"):
                refuse("import", "the private module %s may not be imported" % q(name))
        mod = importlib.import_module(name)
        if fromlist:
            for item in tuple(fromlist):
                if type(item) is not str:
                    refuse("import", "imports need plain str names")
                if item == "*":
                    continue
                if item.startswith("_"):
                    refuse("import", "the private name %s may not be imported from %s" % (q(item), q(name)))
                if not builtins.hasattr(mod, item):
                    try:
                        importlib.import_module(name + "." + item)
                    except ImportError:
                        pass
            return proxy(name)
        return proxy(top)

    # --- gadgets of the allowed modules, guarded in place ------------------

    def safe_attrgetter(attr, *attrs):
        paths = []
        for a in (attr,) + attrs:
            if type(a) is not str:
                refuse("attribute-name", "operator.attrgetter needs plain str attribute names")
            parts = tuple(a.split("."))
            for part in parts:
                check_public(part, "operator.attrgetter")
            paths.append(parts)
        paths = tuple(paths)

        def get(obj, parts):
            for part in parts:
                obj = wrap_value(real_getattr(obj, part))
            return obj

        if len(paths) == 1:
            return lambda obj: get(obj, paths[0])
        return lambda obj: tuple(get(obj, p) for p in paths)

    def safe_methodcaller(name, *args, **kwargs):
        check_public(name, "operator.methodcaller")
        return lambda obj: wrap_value(real_getattr(obj, name))(*args, **kwargs)

    real_update_wrapper = functools.update_wrapper
    std_assigned, std_updated = functools.WRAPPER_ASSIGNMENTS, functools.WRAPPER_UPDATES

    def safe_update_wrapper(wrapper, wrapped, assigned=std_assigned, updated=std_updated):
        assigned, updated = tuple(assigned), tuple(updated)
        for a in assigned:
            if type(a) is not str or a not in std_assigned:
                refuse("gadget", "functools.update_wrapper and functools.wraps may copy only the standard attributes, not %s" % q(a))
        for a in updated:
            if type(a) is not str or a not in std_updated:
                refuse("gadget", "functools.update_wrapper and functools.wraps may update only __dict__, not %s" % q(a))
        return real_update_wrapper(wrapper, wrapped, assigned, updated)

    def user_string_format(self, *args, **kwargs):
        return safe_str_format(self.data, *args, **kwargs)

    def user_string_format_map(self, mapping):
        return safe_str_format_map(self.data, mapping)

    real_get_field = string.Formatter.get_field

    def safe_get_field(self, field_name, args, kwargs):
        p = format_problem("{" + str.__str__(field_name) + "}")
        if p:
            refuse(p[0], "string.Formatter: " + p[1])
        return real_get_field(self, field_name, args, kwargs)

    # functools.singledispatch's register(f) reads f's first annotation
    # through typing.get_type_hints, which evaluates a string annotation
    # with the real eval and builtins. Its guarded register reads the
    # annotation itself, once, refuses strings, and hands the real register
    # the type: the real one never reads annotations.
    real_singledispatch = functools.singledispatch
    # list[int] and int | str (Python 3.9 and 3.10 on).
    alias_types = tuple(t for t in (real_getattr(types, "GenericAlias", None), real_getattr(types, "UnionType", None)) if t)

    def holds_str(t, depth=0):
        if isinstance(t, str):
            return True
        if depth < 20 and type(t) in alias_types:
            return any(holds_str(a, depth + 1) for a in real_getattr(t, "__args__", ()))
        return False

    def safe_singledispatch(func):
        generic = real_singledispatch(func)
        real_register = generic.register

        def register(cls, func=None):
            if func is not None:
                return real_register(cls, func)
            if isinstance(cls, type) or type(cls) in alias_types:
                return lambda f: register(cls, f)
            ann = real_getattr(cls, "__annotations__", None)
            if type(ann) is not dict or not ann:
                raise TypeError("Invalid first argument to `register()`: %r. Use either `@register(some_class)` "
                                "or plain `@register` on an annotated function." % (cls,))
            argname, typ = next(iter(dict.items(ann)))
            if holds_str(typ):
                refuse("gadget", "functools.singledispatch's register may not read the string annotation of %s: "
                                 "the standard library would evaluate it as code" % q(argname))
            if typ is None:
                typ = type(None)
            return real_register(typ, cls)

        generic.register = register
        return generic

    # enum's _convert_ (a method of every enum class, re.RegexFlag among
    # them) hands out the globals of any loaded module it is given the name
    # of. The standard library calls it from a module's own code while that
    # module is being imported, for that module: nothing else may. (It is a
    # method of the metaclass, or a classmethod of Enum in older Pythons.)
    convert_owner = enum.EnumMeta if "_convert_" in enum.EnumMeta.__dict__ else enum.Enum
    convert_wrapped = convert_owner.__dict__.get("_convert_")
    real_convert = real_getattr(convert_wrapped, "__func__", convert_wrapped)

    def safe_convert(cls, name, module, *args, **kwargs):
        mod = sys.modules.get(module) if type(module) is str else None
        spec = real_getattr(mod, "__spec__", None)
        caller = sys._getframe(1)
        if mod is None or caller.f_globals is not real_getattr(mod, "__dict__", None) or real_getattr(spec, "_initializing", False) is not True:
            refuse("gadget", "enum's _convert_ may not read the globals of the module %s" % q(module))
        return real_convert(cls, name, module, *args, **kwargs)

    operator.attrgetter = safe_attrgetter
    operator.methodcaller = safe_methodcaller
    functools.update_wrapper = safe_update_wrapper
    functools.singledispatch = safe_singledispatch
    if real_convert is not None:
        real_setattr(convert_owner, "_convert_", safe_convert if convert_wrapped is real_convert else classmethod(safe_convert))
    collections.UserString.format = user_string_format
    collections.UserString.format_map = user_string_format_map
    string.Formatter.get_field = safe_get_field

    safe_builtins = {k: v for k, v in vars(builtins).items() if not k.startswith("_") and k not in banned_names}
    safe_builtins.update(
        getattr=safe_getattr, hasattr=safe_hasattr, setattr=safe_setattr, delattr=safe_delattr,
        exit=safe_exit, quit=safe_exit,
        __name__="builtins", __import__=safe_import, __build_class__=builtins.__build_class__,
        __codeexec_attr__=attr_hook,
    )

    # --- the syntax tree ---------------------------------------------------
    # The ast module's parse, iter_fields and walk, on the parser's own node
    # classes (_ast): no run needs the rest of that module.

    def fields(node):
        for name in node._fields:
            try:
                yield name, real_getattr(node, name)
            except AttributeError:
                pass

    def children(node):
        for _, value in fields(node):
            if isinstance(value, ast.AST):
                yield value
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        yield item

    def walk(node):
        todo = collections.deque((node,))
        while todo:
            node = todo.popleft()
            todo.extend(children(node))
            yield node

    def syntax_error(e):
        # traceback is imported only to print an error: no run that ends
        # well needs it.
        import traceback
        traceback.print_exception(type(e), e, None)
        sys.exit(1)

    # --- the check ---------------------------------------------------------

    if len(source) > max_source:
        refuse("source-size", "the program has %d bytes, more than the %d the policy allows" % (len(source), max_source), 0)
    try:
        tree = real_compile(source, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        syntax_error(e)
    except (RecursionError, MemoryError):
        refuse("ast-size", "the program is nested too deeply to check", 0)

    nodes = []
    for node in walk(tree):
        nodes.append(node)
        if len(nodes) > max_nodes:
            refuse("ast-size", "the program has more than %d syntax-tree nodes" % max_nodes, 0)

    class_targets = set()
    for node in nodes:
        if isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, ast.Assign):
                    targets = st.targets
                elif isinstance(st, (ast.AnnAssign, ast.AugAssign)):
                    targets = [st.target]
                else:
                    continue
                for t in targets:
                    for n in walk(t):
                        if isinstance(n, ast.Name):
                            class_targets.add(id(n))

    # Every name the program binds anywhere, for class patterns: a builtin
    # class's name that the program rebinds is no longer that class.
    bound_names = set()
    annotations = []
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound_names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound_names.add(node.name)
        elif isinstance(node, ast.alias):
            bound_names.add(node.asname or node.name.partition(".")[0])
            if node.name == "*":
                bound_names.update(self_matching)
        elif isinstance(node, ast.arg):
            bound_names.add(node.arg)
            if node.annotation is not None:
                annotations.append(node.annotation)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound_names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound_names.update(node.names)
        elif type(node).__name__ in ("MatchAs", "MatchStar") and node.name:
            bound_names.add(node.name)
        elif type(node).__name__ == "MatchMapping" and node.rest:
            bound_names.add(node.rest)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    # The annotations that hold text: the standard library evaluates such
    # an annotation as code (typing.get_type_hints, through
    # functools.singledispatch), which this check never sees.
    string_annotations = {}
    for a in annotations:
        for n in walk(a):
            if isinstance(n, ast.JoinedStr) or isinstance(n, ast.Constant) and isinstance(n.value, str):
                string_annotations[id(n)] = a
                break

    def name_problem(node, name, ctx):
        if name in banned_names:
            return "banned-name", "%s is not available" % name
        if is_dunder(name):
            if isinstance(ctx, ast.Load) and name in readable_dunders:
                return None
            if isinstance(ctx, ast.Store) and id(node) in class_targets and name not in unassignable_dunders:
                return None
            return "dunder-name", "the dunder name %s is not accessible" % name
        return None

    def check(node):
        line = getattr(node, "lineno", 0)
        if id(node) in string_annotations:
            refuse("annotation", "a string annotation is not allowed (the standard library evaluates annotation text as code); "
                   "annotate with the type itself", line)
        if isinstance(node, ast.Name):
            p = name_problem(node, node.id, node.ctx)
            if p:
                refuse(p[0], p[1], line)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for n in node.names:
                p = name_problem(node, n, None)
                if p:
                    refuse(p[0], p[1], line)
        elif isinstance(node, ast.Attribute):
            if node.attr in readable_dunder_attrs and isinstance(node.ctx, ast.Load):
                return
            p = attr_problem(node.attr)
            if p:
                refuse(p[0], p[1], line)
        elif isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.partition(".")[0]
                if top not in allowed:
                    refuse("import", "the module %s is not among the allowed imports (%s)" % (q(top), allowed_list), line)
                if any(part.startswith("_") for part in a.name.split(".")):
                    refuse("import", "the private module %s may not be imported" % q(a.name), line)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                refuse("import", "relative imports are not allowed", line)
            mod = node.module or ""
            top = mod.partition(".")[0]
            if top not in allowed:
                refuse("import", "the module %s is not among the allowed imports (%s)" % (q(top), allowed_list), line)
            if any(part.startswith("_") for part in mod.split(".")):
                refuse("import", "the private module %s may not be imported" % q(mod), line)
            for a in node.names:
                if a.name != "*" and a.name.startswith("_"):
                    refuse("import", "the private name %s may not be imported from %s" % (q(a.name), q(mod)), line)
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
                a = node.args[1]
                if isinstance(a, ast.Constant):
                    p = public_problem(a.value, f.id)
                    if p:
                        refuse(p[0], p[1], line)
            if isinstance(f, ast.Attribute) and f.attr in format_attrs and isinstance(f.value, ast.Constant) and type(f.value.value) is str:
                p = format_problem(f.value.value)
                if p:
                    refuse(p[0], p[1], line)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute) and node.target.attr in format_attrs:
            # x.format += y reads the real method and hands it to y.__radd__.
            refuse("format-field", "an augmented assignment may not read the method %s" % q(node.target.attr), line)
        elif type(node).__name__ == "MatchClass":
            if node.patterns and not (isinstance(node.cls, ast.Name) and node.cls.id in self_matching and node.cls.id not in bound_names):
                refuse("match-class", "a class pattern may take positional sub-patterns only for the builtins %s (for any other class "
                       "they read the attributes that its __match_args__ names, which the check cannot see); name the attributes "
                       "instead, as in Point(x=a, y=b)" % ", ".join(sorted(self_matching)), line)
            for a in node.kwd_attrs:
                p = attr_problem(a)
                if p is None and a in format_attrs:
                    p = "format-field", "a class pattern may not capture the method %s" % q(a)
                if p:
                    refuse(p[0], p[1], line)

    # The earliest problem in the text is the one reported.
    for node in sorted(nodes, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0), getattr(n, "end_col_offset", 0))):
        check(node)

    # --- the rewrite: obj.format -> __codeexec_attr__(obj, "format") ---------

    def rewrite(value):
        if isinstance(value, ast.Attribute) and value.attr in format_attrs and isinstance(value.ctx, ast.Load):
            at = {a: real_getattr(value, a) for a in ("lineno", "col_offset", "end_lineno", "end_col_offset")}
            return ast.Call(func=ast.Name(id="__codeexec_attr__", ctx=ast.Load(), **at),
                            args=[value.value, ast.Constant(value=value.attr, **at)], keywords=[], **at)
        return value

    for node in nodes:
        for field, value in fields(node):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    value[i] = rewrite(item)
            else:
                new = rewrite(value)
                if new is not value:
                    real_setattr(node, field, new)

    try:
        code = real_compile(tree, filename, "exec", dont_inherit=True)
    except (RecursionError, MemoryError):
        refuse("ast-size", "the program is nested too deeply to compile", 0)
    except (SyntaxError, ValueError) as e:
        syntax_error(e)
    # Tracebacks show the program's own lines, not the bootstrap's.
    text = source.decode("utf-8", "replace")
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    del tree, nodes, source, payload, text

    # --- the run -----------------------------------------------------------

    user_globals.update({"__name__": "__main__", "__doc__": None, "__file__": filename, "__builtins__": safe_builtins})
    try:
        real_exec(code, user_globals)
    except SystemExit:
        raise
    except BaseException as e:
        # The traceback leaves the bootstrap's own frames out. (traceback
        # comes from the standard library, as every module above: a run's
        # files and package folder come after it on sys.path.)
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
        try:
            import traceback
        except BaseException:
            os.write(2, ("%s (the traceback could not be printed)\n" % type(e).__name__).encode())
            os._exit(status)

        def stack(tb):
            return traceback.StackSummary.extract(
                (f, n) for f, n in traceback.walk_tb(tb) if f.f_globals is not boot_globals)

        def trim(te, exc, depth=0):
            if te is None or exc is None or depth > 50:
                return
            te.stack = stack(exc.__traceback__)
            trim(te.__cause__, exc.__cause__, depth + 1)
            trim(te.__context__, exc.__context__, depth + 1)

        te = traceback.TracebackException(type(e), e, e.__traceback__)
        trim(te, e)
        sys.stderr.write("".join(te.format()))
        sys.exit(status)


