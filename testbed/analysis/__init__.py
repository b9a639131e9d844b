"""Analysis: tables, figures and the HTML report, made from run folders only."""
