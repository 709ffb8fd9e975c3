"""What an analysis declares (tables, figures, sections: the report blocks) and how every number in it is written;
the suites and the studies return these, behavioral.analysis writes them."""
