"""Index notation: expression AST, parser, Python DSL."""
