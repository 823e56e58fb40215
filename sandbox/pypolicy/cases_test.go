package pypolicy_test

import "strings"

// escape is a program the policy must refuse, with the rule and the line
// the refusal names. allow adds imports to the default ones; nodes sets the
// AST node cap.
type escape struct {
	name, technique, code, rule string
	line                        int
	allow                       []string
	nodes                       int
}

// escapes are drawn from the RestrictedPython, agex and pyjail write-ups:
// import tricks, builtins recovery through the class hierarchy,
// format-string attribute walks, type() gadgets, generator and frame walks,
// decorators and lambdas that smuggle names, NFKC identifier
// normalisation, and gadgets of the allowed modules.
var escapes = []escape{
	// Import tricks.
	{name: "import-os", technique: "import", code: "import os\nos.system('id')", rule: "import", line: 1},
	{name: "from-subprocess", technique: "import", code: "x = 1\nfrom subprocess import run", rule: "import", line: 2},
	{name: "import-importlib", technique: "import", code: "import importlib\nimportlib.import_module('os')", rule: "import", line: 1},
	{name: "dunder-import", technique: "import", code: "__import__('os').system('id')", rule: "banned-name", line: 1},
	{name: "builtins-subscript", technique: "import", code: "__builtins__['__import__']('os')", rule: "banned-name", line: 1},
	{name: "relative-import", technique: "import", code: "from . import secrets", rule: "import", line: 1},
	{name: "private-module", technique: "import", code: "import _io", rule: "import", line: 1},
	{name: "private-name-from-allowed", technique: "import", code: "from collections import _sys", rule: "import", line: 1},
	{name: "module-leak-statistics-sys", technique: "import", code: "import statistics\nstatistics.sys.modules['os'].system('id')", rule: "module-attribute", line: 2},
	{name: "module-leak-from-import", technique: "import", code: "from statistics import sys", rule: "module-attribute", line: 1},
	{name: "module-leak-private-attr", technique: "import", code: "import collections\nprint(collections._sys)", rule: "module-attribute", line: 2},
	{name: "module-leak-json-codecs", technique: "import", code: "import json\n\nprint(json.codecs)", rule: "module-attribute", line: 3},
	{name: "print-self-builtins", technique: "import", code: "print.__self__.open('/etc/passwd')", rule: "dunder-attribute", line: 1},

	// Banned builtins.
	{name: "open", technique: "builtins", code: "print(open('/etc/passwd').read())", rule: "banned-name", line: 1},
	{name: "eval", technique: "builtins", code: "x = 2\nprint(eval('x*2'))", rule: "banned-name", line: 2},
	{name: "exec", technique: "builtins", code: "exec('import os')", rule: "banned-name", line: 1},
	{name: "compile", technique: "builtins", code: "c = compile('1', 'f', 'eval')", rule: "banned-name", line: 1},
	{name: "globals", technique: "builtins", code: "globals()['__builtins__']", rule: "banned-name", line: 1},
	{name: "locals", technique: "builtins", code: "def f():\n    return locals()", rule: "banned-name", line: 2},
	{name: "vars", technique: "builtins", code: "print(vars(str))", rule: "banned-name", line: 1},
	{name: "breakpoint", technique: "builtins", code: "breakpoint()", rule: "banned-name", line: 1},
	{name: "global-builtins-statement", technique: "builtins", code: "def f():\n    global __builtins__", rule: "banned-name", line: 2},

	// Builtins recovery through the class hierarchy.
	{name: "tuple-subclasses", technique: "class-hierarchy", code: "print(().__class__.__base__.__subclasses__())", rule: "dunder-attribute", line: 1},
	{name: "object-subclasses", technique: "class-hierarchy", code: "for c in object.__subclasses__():\n    print(c)", rule: "class-hierarchy", line: 1},
	{name: "mro-method", technique: "class-hierarchy", code: "print(type.mro(type(1)))", rule: "class-hierarchy", line: 1},
	{name: "getattr-constant-dunder", technique: "class-hierarchy", code: "c = getattr((), '__class__')", rule: "attribute-name", line: 1},
	{name: "getattr-built-name", technique: "class-hierarchy", code: "n = '__cla' + 'ss__'\nprint(getattr((), n))", rule: "attribute-name", line: 2},
	{name: "getattr-private", technique: "class-hierarchy", code: "class A:\n    _x = 1\nprint(getattr(A, '_x'))", rule: "attribute-name", line: 3},
	{name: "setattr-code", technique: "class-hierarchy", code: "def f(): pass\nsetattr(f, '__code__', None)", rule: "attribute-name", line: 2},
	{name: "delattr-dunder", technique: "class-hierarchy", code: "class A: pass\ndelattr(A, '__doc__')", rule: "attribute-name", line: 2},
	{name: "hasattr-globals", technique: "class-hierarchy", code: "print(hasattr(len, '__globals__'))", rule: "attribute-name", line: 1},
	{name: "class-assignment", technique: "class-hierarchy", code: "class A: pass\na = A()\na.__class__ = int", rule: "dunder-attribute", line: 3},
	{name: "class-cell-name", technique: "class-hierarchy", code: "class A:\n    def f(self):\n        return __class__", rule: "dunder-name", line: 3},
	{name: "module-annotations-name", technique: "class-hierarchy", code: "x: int = 1\nprint(__annotations__)", rule: "dunder-name", line: 2},
	{name: "class-body-builtins", technique: "class-hierarchy", code: "class A:\n    __builtins__ = 1", rule: "banned-name", line: 2},

	// Format-string attribute walks.
	{name: "format-constant", technique: "format", code: "print('{0.__class__}'.format(1))", rule: "format-field", line: 1},
	{name: "format-map-constant", technique: "format", code: "print('{x.__class__.__base__}'.format_map({'x': 1}))", rule: "format-field", line: 1},
	{name: "format-built-at-run-time", technique: "format", code: "print('ok')\nf = '{0.' + '__globals__}'\nprint(f.format(len))", rule: "format-field", line: 3},
	{name: "format-nested-spec", technique: "format", code: "print('{0:{1.__class__}}'.format(1, 2))", rule: "format-field", line: 1},
	{name: "format-unbound", technique: "format", code: "f = str.format\nprint(f('{0.__class__}', 1))", rule: "format-field", line: 2},
	{name: "format-via-getattr", technique: "format", code: "m = getattr('{0.__class__}', 'format')\nprint(m(1))", rule: "format-field", line: 2},
	{name: "format-frame-walk", technique: "format", code: "g = (i for i in [1])\nprint('{0.gi_frame}'.format(g))", rule: "format-field", line: 2},
	{name: "format-match-capture", technique: "format", code: "match 'x':\n    case str(format=f):\n        print(f('{0.__class__}', 1))", rule: "format-field", line: 2},
	{name: "format-augassign-radd", technique: "format", code: "grab = []\nclass G:\n    def __radd__(self, other):\n        grab.append(other)\n        return 0\nclass S(str):\n    pass\ns = S()\ns.format += G()", rule: "format-field", line: 9},
	{name: "userstring-format", technique: "format", code: "import collections\ns = collections.UserString('{0.__class__}')\nprint(s.format(1))", rule: "format-field", line: 3},
	{name: "string-formatter", technique: "format", code: "import string\nprint(string.Formatter().format('{0.__class__}', 1))", rule: "format-field", line: 2, allow: []string{"string"}},

	// type() gadgets.
	{name: "type-subclasses", technique: "type", code: "print(type(1).__subclasses__())", rule: "class-hierarchy", line: 1},
	{name: "type-function-ctor", technique: "type", code: "f = lambda: 0\ng = type(f)(f.__code__, {})", rule: "dunder-attribute", line: 2},
	{name: "type-dict", technique: "type", code: "print(type(type).__dict__)", rule: "dunder-attribute", line: 1},
	{name: "class-pattern-dunder", technique: "type", code: "match 1:\n    case object(__class__=c):\n        print(c)", rule: "dunder-attribute", line: 2},

	// Generator, coroutine, traceback and frame walks.
	{name: "generator-frame", technique: "frames", code: "g = (x for x in [1])\nprint(g.gi_frame.f_back.f_globals)", rule: "frame-internals", line: 2},
	{name: "generator-code", technique: "frames", code: "def f():\n    yield 1\nprint(f().gi_code)", rule: "frame-internals", line: 3},
	{name: "coroutine-frame", technique: "frames", code: "async def f():\n    pass\nc = f()\nprint(c.cr_frame)", rule: "frame-internals", line: 4},
	{name: "traceback-dunder", technique: "frames", code: "try:\n    1/0\nexcept Exception as e:\n    tb = e.__traceback__", rule: "dunder-attribute", line: 4},
	{name: "exit-traceback-frame", technique: "frames", code: "class C:\n    def __enter__(self):\n        return self\n    def __exit__(self, t, v, tb):\n        print(tb.tb_frame)\nwith C():\n    1/0", rule: "frame-internals", line: 5},
	{name: "getattr-frame-built", technique: "frames", code: "g = (x for x in [1])\nprint(getattr(g, 'gi_' + 'frame'))", rule: "frame-internals", line: 2},

	// Decorators and lambdas that smuggle names.
	{name: "decorator-eval", technique: "smuggling", code: "@eval\ndef f():\n    pass", rule: "banned-name", line: 1},
	{name: "lambda-default-globals", technique: "smuggling", code: "f = lambda g=globals: g()", rule: "banned-name", line: 1},
	{name: "decorator-globals-walk", technique: "smuggling", code: "def d(f):\n    return f.__globals__\n@d\ndef g():\n    pass", rule: "dunder-attribute", line: 2},
	{name: "lambda-builtins", technique: "smuggling", code: "print((lambda: __builtins__)())", rule: "banned-name", line: 1},
	{name: "aliased-getattr", technique: "smuggling", code: "g = getattr\nprint(g((), '__class__'))", rule: "attribute-name", line: 2},
	{name: "class-base-walk", technique: "smuggling", code: "class X(().__class__):\n    pass", rule: "dunder-attribute", line: 1},

	// Unicode identifier normalisation (NFKC).
	{name: "nfkc-eval", technique: "unicode", code: "print(ｅval('1'))", rule: "banned-name", line: 1},
	{name: "nfkc-dunder-attribute", technique: "unicode", code: "print(().__ｃlass__)", rule: "dunder-attribute", line: 1},
	{name: "nfkc-getattr-string", technique: "unicode", code: "print(getattr((), '__ｃlass__'))", rule: "attribute-name", line: 1},
	{name: "fullwidth-low-line", technique: "unicode", code: "n = '\uff3f\uff3fclass\uff3f\uff3f'\nprint(getattr((), n))", rule: "attribute-name", line: 2},
	{name: "nfkc-builtins-name", technique: "unicode", code: "print(__ｂuiltins__)", rule: "banned-name", line: 1},

	// Gadgets of the allowed modules.
	{name: "attrgetter-dunder", technique: "gadget", code: "import operator\nprint(operator.attrgetter('__class__')(1))", rule: "attribute-name", line: 2},
	{name: "attrgetter-getattribute", technique: "gadget", code: "import operator\nga = operator.attrgetter('__getattribute__')", rule: "attribute-name", line: 2},
	{name: "attrgetter-frame-path", technique: "gadget", code: "import operator\ng = (x for x in [1])\nprint(operator.attrgetter('gi_frame.f_back')(g))", rule: "frame-internals", line: 3},
	{name: "attrgetter-format", technique: "gadget", code: "import operator\nm = operator.attrgetter('format')('{0.__class__}')\nprint(m(1))", rule: "format-field", line: 3},
	{name: "methodcaller-subclasses", technique: "gadget", code: "import operator\nprint(operator.methodcaller('__subclasses__')(object))", rule: "attribute-name", line: 2},
	{name: "methodcaller-format", technique: "gadget", code: "import operator\nprint(operator.methodcaller('format', 1)('{0.__class__}'))", rule: "format-field", line: 2},
	{name: "functools-update-wrapper-globals", technique: "gadget", code: "import functools, statistics\ndef w(): pass\nfunctools.update_wrapper(w, statistics.mean, assigned=(), updated=('__globals__',))", rule: "gadget", line: 3},
	{name: "functools-wraps-assigned", technique: "gadget", code: "import functools\nd = functools.wraps(len, assigned=('__self__',))\nd(lambda: 0)", rule: "gadget", line: 3},
	{name: "functools-reduce-getattr", technique: "gadget", code: "import functools\nprint(functools.reduce(getattr, ['__class__'], ()))", rule: "attribute-name", line: 2},
	{name: "functools-partial-getattr", technique: "gadget", code: "import functools\np = functools.partial(getattr, ())\nprint(p('__class__'))", rule: "attribute-name", line: 3},
	{name: "re-private-compiler", technique: "gadget", code: "import re\nprint(re._compiler)", rule: "module-attribute", line: 2},
	{name: "collections-userstring-format-map", technique: "gadget", code: "import collections\nu = collections.UserString('{x.__class__}')\nprint(u.format_map({'x': 1}))", rule: "format-field", line: 3},

	// Class patterns: a positional sub-pattern reads the attribute that the
	// class's __match_args__ names, and a metaclass decides both what
	// matches (__instancecheck__) and what __match_args__ is.
	{name: "match-positional-metaclass", technique: "match", code: "class M(type):\n    def __instancecheck__(cls, obj):\n        return True\nclass C(metaclass=M):\n    __match_args__ = ('__globals__',)\ndef f():\n    pass\nmatch f:\n    case C(g):\n        print(g)", rule: "match-class", line: 9},
	{name: "match-positional-metaclass-getattr", technique: "match", code: "class M(type):\n    def __instancecheck__(cls, obj):\n        return True\n    def __getattr__(cls, name):\n        return ('__globals__',)\nclass C(metaclass=M):\n    pass\ndef f():\n    pass\nmatch f:\n    case C(g):\n        print(g)", rule: "match-class", line: 11},
	{name: "match-positional-class-made-at-run-time", technique: "match", code: "M = type('M', (type,), {'__instancecheck__': lambda c, o: True})\nC = M('C', (), {'__match_args__': ('__globals__',)})\ndef f():\n    pass\nmatch f:\n    case C(g):\n        print(g)", rule: "match-class", line: 6},
	{name: "match-positional-rebound-builtin", technique: "match", code: "class M(type):\n    def __instancecheck__(cls, obj):\n        return True\nclass int(metaclass=M):\n    __match_args__ = ('__globals__',)\ndef f():\n    pass\nmatch f:\n    case int(g):\n        print(g)", rule: "match-class", line: 9},

	// Strings that the standard library evaluates as code: annotations,
	// which functools.singledispatch's register reads through
	// typing.get_type_hints, with the real eval and builtins.
	{name: "annotation-string-singledispatch", technique: "string-eval", code: "import functools\n@functools.singledispatch\ndef f(x):\n    return 0\ndef g(x: \"().__class__.__base__.__subclasses__()\"):\n    return 1\nf.register(g)", rule: "annotation", line: 5},
	{name: "annotation-string-in-generic-alias", technique: "string-eval", code: "import functools\nf = functools.singledispatch(lambda x: 0)\ndef g(x: list['().__class__']):\n    return 1\nf.register(g)", rule: "annotation", line: 3},
	{name: "annotation-string-class-body", technique: "string-eval", code: "class P:\n    x: 'int'\n    y: int = 0", rule: "annotation", line: 2},
	{name: "annotation-built-at-run-time", technique: "string-eval", code: "import functools\nf = functools.singledispatch(lambda x: 0)\ns = '().__class__.__base__'\ndef g(x: s):\n    return 1\nf.register(g)", rule: "gadget", line: 6},
	{name: "annotation-from-getattr-hook", technique: "string-eval", code: "import functools\nclass A:\n    def __getattr__(self, name):\n        if name == '__annotations__':\n            return {'x': \"__import__('os').popen('id').read()\"}\n        raise AttributeError(name)\n    def __call__(self, x):\n        return 1\nf = functools.singledispatch(lambda x: 0)\nf.register(A())", rule: "gadget", line: 10},
	{name: "annotation-singledispatchmethod", technique: "string-eval", code: "import functools\ns = '().__class__'\nclass K:\n    @functools.singledispatchmethod\n    def m(self, x):\n        return 0\n    def n(self, x: s):\n        return 1\n    m.register(n)", rule: "gadget", line: 9},
	{name: "annotations-dict-class-body", technique: "string-eval", code: "class W:\n    __annotations__ = {'x': '().__class__'}", rule: "dunder-name", line: 2},
	{name: "attrgetter-dotted-dunder", technique: "string-eval", code: "import operator\nprint(operator.attrgetter('real.__class__')(1))", rule: "attribute-name", line: 2},
	{name: "format-map-missing", technique: "string-eval", code: "class D(dict):\n    def __missing__(self, k):\n        return len\nprint('{x.__self__}'.format_map(D()))", rule: "format-field", line: 4},

	// enum's _convert_, reachable from every enum of the allowed modules
	// (re.RegexFlag): it reads any loaded module's globals by name.
	{name: "enum-convert-module-globals", technique: "gadget", code: "import re\nX = re.RegexFlag._convert_('X', 'os', lambda k: k == 'popen')\nprint(X.popen('id').read())", rule: "gadget", line: 2},

	// Caps.
	{name: "ast-node-cap", technique: "size", code: "x = [" + strings.Repeat("1, ", 200) + "]", rule: "ast-size", nodes: 100},
	{name: "source-size-cap", technique: "size", code: "# " + strings.Repeat("x", 300<<10) + "\nprint(1)", rule: "source-size"},
}

// ordinary is a program that must run under the policy and print want.
type ordinary struct {
	name, code, stdin, want string
	exit                    int
}

var ordinaries = []ordinary{
	{name: "documented-example", code: "print(2**64)", want: "18446744073709551616\n"},
	{name: "arithmetic", code: "print(7 // 2, 7 % 3, 2 ** 10, 1 / 4, -7 // 2, abs(-3), round(2.675, 2))", want: "3 1 1024 0.25 -4 3 2.67\n"},
	{name: "comprehensions", code: "sq = [i * i for i in range(5)]\nd = {k: v for k, v in zip('ab', (1, 2))}\ns = {c for c in 'hello'}\nprint(sq, d, sorted(s), sum(i for i in range(10)))", want: "[0, 1, 4, 9, 16] {'a': 1, 'b': 2} ['e', 'h', 'l', 'o'] 45\n"},
	{name: "functions-and-closures", code: "def counter(start=0, *, step=1):\n    n = start\n    def inc():\n        nonlocal n\n        n += step\n        return n\n    return inc\nc = counter(10, step=5)\nc()\nprint(c())\ndef f(*a, **k):\n    return len(a), sorted(k)\nprint(f(1, 2, x=3))", want: "20\n(2, ['x'])\n"},
	{name: "classes", code: "class Animal:\n    def __init__(self, name):\n        self._name = name\n    def __repr__(self):\n        return f'{type(self).__name__}({self._name!r})'\n    def speak(self):\n        return '...'\nclass Dog(Animal):\n    def speak(self):\n        return super().speak() + 'woof'\nd = Dog('rex')\nprint(d, d.speak(), isinstance(d, Animal))", want: "Dog('rex') ...woof True\n"},
	{name: "properties-classmethods", code: "class T:\n    __slots__ = ('_c',)\n    def __init__(self, c):\n        self._c = c\n    @property\n    def f(self):\n        return self._c * 9 / 5 + 32\n    @classmethod\n    def zero(cls):\n        return cls(0)\n    @staticmethod\n    def unit():\n        return 'C'\nprint(T.zero().f, T(100).f, T.unit())", want: "32.0 212.0 C\n"},
	{name: "fstrings", code: "x, y, z = 42, 'hi', 3.14159\nprint(f'{x:>5}|{y!r}|{z:.3f}|{x=}')", want: "   42|'hi'|3.142|x=42\n"},
	{name: "str-format-plain", code: "class P:\n    x = 3\nt = '{0} {name} {0[1]} {p.x}'\nprint(t.format([1, 2], name='n', p=P()))\nprint('{:08.3f}'.format(3.14159), '%s-%d' % ('a', 5), format(255, 'x'))", want: "[1, 2] n 2 3\n0003.142 a-5 ff\n"},
	{name: "exceptions", code: "class Oops(Exception):\n    pass\ntry:\n    raise Oops('bad')\nexcept Oops as e:\n    print('caught', e, e.args)\nfinally:\n    print('finally')\ntry:\n    {}['k']\nexcept KeyError as e:\n    print(repr(e))", want: "caught bad ('bad',)\nfinally\nKeyError('k')\n"},
	{name: "generators", code: "def gen(n):\n    yield from range(n)\n    yield 'end'\nprint(list(gen(3)))\ng = (i for i in 'ab')\nprint(next(g), next(g), next(g, None))", want: "[0, 1, 2, 'end']\na b None\n"},
	{name: "datetime-calendar", code: "import datetime, calendar\nd = datetime.date(2024, 1, 31) + datetime.timedelta(days=1)\nprint(d, d.strftime('%A'), calendar.isleap(2024), calendar.monthrange(2024, 2))", want: "2024-02-01 Thursday True (3, 29)\n"},
	{name: "re", code: "import re\nprint(re.findall(r'\\d+', 'a1b22c333'), re.sub(r'(\\w+)@(\\w+)', r'\\2 at \\1', 'me@host'))\nm = re.match(r'(?P<k>\\w+)=(?P<v>\\w+)', 'a=b')\nprint(m.group('k'), m['v'], m.groupdict())", want: "['1', '22', '333'] host at me\na b {'k': 'a', 'v': 'b'}\n"},
	{name: "math-decimal-fractions", code: "import math\nfrom decimal import Decimal, getcontext\nfrom fractions import Fraction\nprint(math.gcd(12, 18), math.isqrt(17), Decimal('0.1') + Decimal('0.2'), Fraction(1, 3) + Fraction(1, 6))\ngetcontext().prec = 5\nprint(Decimal(1) / Decimal(7))", want: "6 4 0.3 1/2\n0.14286\n"},
	{name: "statistics", code: "import statistics as st\ndata = [2, 4, 4, 4, 5, 5, 7, 9]\nprint(st.mean(data), st.median(data), st.pstdev(data), st.mode(data))", want: "5 4.5 2.0 4\n"},
	{name: "collections", code: "from collections import Counter, defaultdict, namedtuple, deque, OrderedDict\nimport collections.abc\nprint(Counter('abracadabra').most_common(2))\ndd = defaultdict(list)\ndd['a'].append(1)\nprint(dict(dd))\nP = namedtuple('P', 'x y')\np = P(1, 2)\nprint(p._asdict(), p._replace(x=5), P._fields)\nq = deque([1, 2], maxlen=2)\nq.append(3)\nprint(list(q), list(OrderedDict(b=1, a=2)), isinstance([], collections.abc.Sequence))", want: "[('a', 5), ('b', 2)]\n{'a': [1]}\n{'x': 1, 'y': 2} P(x=5, y=2) ('x', 'y')\n[2, 3] ['b', 'a'] True\n"},
	{name: "itertools", code: "import itertools as it\nprint(list(it.permutations('abc', 2))[:3], list(it.accumulate([1, 2, 3])), [(k, len(list(g))) for k, g in it.groupby('aabbb')])\nprint(list(it.islice(it.count(10, 5), 3)), list(it.chain([1], (2,))))", want: "[('a', 'b'), ('a', 'c'), ('b', 'a')] [1, 3, 6] [('a', 2), ('b', 3)]\n[10, 15, 20] [1, 2]\n"},
	{name: "functools", code: "import functools\n@functools.lru_cache(maxsize=None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\ndef deco(f):\n    @functools.wraps(f)\n    def w(*a):\n        return f(*a) * 2\n    return w\n@deco\ndef one():\n    'doc'\n    return 1\nadd = functools.partial(lambda a, b: a + b, 10)\nprint(fib(80), one(), one.__name__, functools.reduce(lambda a, b: a * b, range(1, 6)), add(5))", want: "23416728348467685 2 one 120 15\n"},
	{name: "operator", code: "import operator\nrows = [('b', 2), ('a', 1)]\nprint(sorted(rows, key=operator.itemgetter(1)))\nclass P:\n    def __init__(self, x):\n        self.x = x\nprint(operator.attrgetter('x')(P(7)), operator.methodcaller('upper')('hi'), operator.add(2, 3))", want: "[('a', 1), ('b', 2)]\n7 HI 5\n"},
	{name: "json", code: "import json\nd = json.loads('{\"b\": [1, 2.5, null], \"a\": true}')\nprint(json.dumps(d, sort_keys=True), d['b'][1])", want: "{\"a\": true, \"b\": [1, 2.5, null]} 2.5\n"},
	{name: "stdin", code: "a = int(input())\nb = int(input())\nprint(a + b)", stdin: "3\n4\n", want: "7\n"},
	{name: "main-guard-and-builtins", code: "def main():\n    words = 'the quick brown fox'.split()\n    print(max(words, key=len), sorted(map(str.upper, filter(lambda w: 'o' in w, words))), list(enumerate('ab', 1)))\nif __name__ == '__main__':\n    main()", want: "quick ['BROWN', 'FOX'] [(1, 'a'), (2, 'b')]\n"},
	{name: "match-statement", code: "class Point:\n    __match_args__ = ('x', 'y')\n    def __init__(self, x, y):\n        self.x, self.y = x, y\ndef where(p):\n    match p:\n        case Point(x=0, y=0):\n            return 'origin'\n        case Point(x=0):\n            return 'y-axis'\n        case {'k': v}:\n            return f'map {v}'\n        case _:\n            return 'elsewhere'\nprint(where(Point(0, 0)), where(Point(0, 3)), where({'k': 1}), where(5))", want: "origin y-axis map 1 elsewhere\n"},
	{name: "getattr-public", code: "class C:\n    size = 3\nc = C()\nsetattr(c, 'color', 'red')\nprint(getattr(c, 'size'), getattr(c, 'missing', None), hasattr(c, 'color'), c.color)\ndelattr(c, 'color')\nprint(hasattr(c, 'color'))", want: "3 None True red\nFalse\n"},
	{name: "star-import-and-unicode-names", code: "from math import *\ncafé = floor(2.5)\nprint(café, pi > 3)", want: "2 True\n"},
	{name: "match-builtin-positional", code: "def kind(v):\n    match v:\n        case int(n) if n > 0:\n            return f'positive {n}'\n        case str(s):\n            return 'text ' + s\n        case [int(a), int(b)]:\n            return a + b\n        case _:\n            return 'other'\nprint(kind(3), kind('x'), kind([1, 2]), kind(2.5))", want: "positive 3 text x 3 other\n"},
	{name: "annotations-and-singledispatch", code: "import functools\n@functools.singledispatch\ndef show(x) -> str:\n    return 'thing'\n@show.register\ndef _(x: int) -> str:\n    return 'int'\n@show.register(list)\ndef _(x):\n    return 'list'\n@show.register\ndef _(x: float | str) -> str:\n    return 'float or str'\ndef total(xs: list[int], *rest: int, scale: float = 1.0) -> float:\n    return (sum(xs) + sum(rest)) * scale\ny: int = 3\nprint(show(1), show([1]), show(2.5), show('s'), show(None), total([1, 2], 3, scale=2.0), y)", want: "int list float or str float or str thing 12.0 3\n"},
	{name: "re-flags-and-namedtuple", code: "import re, collections\nprint(bool(re.search('a.c', 'A\\nC', re.I | re.S)), re.I.name, int(re.M))\nP = collections.namedtuple('P', 'x y', defaults=[0])\np = P(1)\nprint(p, p._asdict(), p._replace(y=5))", want: "True IGNORECASE 8\nP(x=1, y=0) {'x': 1, 'y': 0} P(x=1, y=5)\n"},
	{name: "exit-status", code: "print('bye')\nexit(3)", want: "bye\n", exit: 3},
	{name: "uncaught-exception", code: "print('before')\nraise ValueError('boom')", want: "before\n", exit: 1},
}
