#pragma once
// The report as a document: a title and a sequence of blocks (headings, paragraphs, tables,
// lists), which render_markdown and render_html lay out. The train and prep writers
// (report_documents.h, html_report.h) say what is in each section; how a heading, a table or a
// list is written, and the blank lines between them, is decided here once per format.
//
// Text is the renderer's own: render_markdown writes it as given (a writer passes markdown:
// **bold**, markdown_literal for names from outside), render_html escapes it. A raw block is
// output already in the renderer's format (report.html's SVG charts and verdict boxes), written
// as given. report.json is not rendered from a document: it is the facts' serialisation, and its
// field names are a contract with the scripts that read it (docs/report.md).
#include <string>
#include <vector>

namespace sluice::report {

struct DocumentTable {
  enum class Align { left, right };
  std::vector<std::string> header;
  std::vector<Align> align;  // per column (markdown's |---| or |--:|); left where missing
  std::vector<std::vector<std::string>> rows;
  // A totals row after the rows (report.md's padding table): markdown writes its empty cells
  // closed up, "| **all** | | |", where an empty cell of `rows` is "|  |" (report.md has always
  // been written so). None when empty.
  std::vector<std::string> total_row;
};

struct DocumentListItem {
  std::string text;
  std::vector<std::string> sub_items;
};

struct DocumentBlock {
  enum class Kind { heading, paragraph, strong_paragraph, table, list, raw };
  Kind kind = Kind::paragraph;
  int level = 2;     // heading: 1 is the title
  std::string text;  // heading, paragraph, raw
  DocumentTable table;
  std::vector<DocumentListItem> items;
};

class ReportDocument {
 public:
  ReportDocument& heading(std::string text, int level = 2);
  ReportDocument& paragraph(std::string text);
  ReportDocument& strong_paragraph(std::string text);
  ReportDocument& table(DocumentTable table);
  // A list is followed by a blank line even when it has no items (report.md has always been
  // written so).
  ReportDocument& list(std::vector<DocumentListItem> items);
  ReportDocument& raw(std::string output);

  const std::vector<DocumentBlock>& blocks() const { return blocks_; }

 private:
  std::vector<DocumentBlock> blocks_;
};

// Markdown: "# title", "## heading", paragraphs and tables each followed by a blank line; a table
// row is "| a | b |" (an empty cell "| |"); a list item "- text" with sub-items "  - text".
std::string render_markdown(const ReportDocument& document);

// HTML fragments, no separators: <hN>, <p>, <p><b>, <table> with <th> and <td> cells, <ul>.
std::string render_html(const ReportDocument& document);

// Text for HTML: < > & " as entities.
std::string html_escape(const std::string& text);

}  // namespace sluice::report
