#include "report/report_document.h"

namespace sluice::report {
namespace {

// "| a |  | b |"; closed_up: "| a | | b |".
std::string markdown_row(const std::vector<std::string>& cells, bool closed_up = false) {
  std::string row = "|";
  for (const auto& cell : cells) row += closed_up && cell.empty() ? " |" : " " + cell + " |";
  return row + "\n";
}

std::string markdown_table(const DocumentTable& table) {
  std::string md = markdown_row(table.header) + "|";
  for (size_t i = 0; i < table.header.size(); ++i) {
    const bool right = i < table.align.size() && table.align[i] == DocumentTable::Align::right;
    md += right ? "--:|" : "---|";
  }
  md += "\n";
  for (const auto& row : table.rows) md += markdown_row(row);
  if (!table.total_row.empty()) md += markdown_row(table.total_row, true);
  return md + "\n";
}

std::string markdown_block(const DocumentBlock& b) {
  using Kind = DocumentBlock::Kind;
  switch (b.kind) {
    case Kind::heading: return std::string(static_cast<size_t>(b.level), '#') + " " + b.text + "\n\n";
    case Kind::paragraph: return b.text + "\n\n";
    case Kind::strong_paragraph: return "**" + b.text + "**\n\n";
    case Kind::table: return markdown_table(b.table);
    case Kind::raw: return b.text;
    case Kind::list: break;
  }
  std::string md;
  for (const auto& item : b.items) {
    md += "- " + item.text + "\n";
    for (const auto& sub : item.sub_items) md += "  - " + sub + "\n";
  }
  return md + "\n";
}

std::string html_row(const std::vector<std::string>& cells, const char* tag) {
  std::string html = "<tr>";
  for (const auto& cell : cells) html += std::string("<") + tag + ">" + html_escape(cell) + "</" + tag + ">";
  return html + "</tr>";
}

std::string html_table(const DocumentTable& table) {
  std::string html = "<table>" + html_row(table.header, "th");
  for (const auto& row : table.rows) html += html_row(row, "td");
  if (!table.total_row.empty()) html += html_row(table.total_row, "td");
  return html + "</table>";
}

std::string html_block(const DocumentBlock& b) {
  using Kind = DocumentBlock::Kind;
  switch (b.kind) {
    case Kind::heading: {
      const std::string tag = "h" + std::to_string(b.level);
      return "<" + tag + ">" + html_escape(b.text) + "</" + tag + ">";
    }
    case Kind::paragraph: return "<p>" + html_escape(b.text) + "</p>";
    case Kind::strong_paragraph: return "<p><b>" + html_escape(b.text) + "</b></p>";
    case Kind::table: return html_table(b.table);
    case Kind::raw: return b.text;
    case Kind::list: break;
  }
  std::string html = "<ul>";
  for (const auto& item : b.items) {
    html += "<li>" + html_escape(item.text);
    if (!item.sub_items.empty()) {
      html += "<ul>";
      for (const auto& sub : item.sub_items) html += "<li>" + html_escape(sub) + "</li>";
      html += "</ul>";
    }
    html += "</li>";
  }
  return html + "</ul>";
}

DocumentBlock block(DocumentBlock::Kind kind, std::string text) {
  DocumentBlock b;
  b.kind = kind;
  b.text = std::move(text);
  return b;
}

}  // namespace

ReportDocument& ReportDocument::heading(std::string text, int level) {
  blocks_.push_back(block(DocumentBlock::Kind::heading, std::move(text)));
  blocks_.back().level = level;
  return *this;
}

ReportDocument& ReportDocument::paragraph(std::string text) {
  blocks_.push_back(block(DocumentBlock::Kind::paragraph, std::move(text)));
  return *this;
}

ReportDocument& ReportDocument::strong_paragraph(std::string text) {
  blocks_.push_back(block(DocumentBlock::Kind::strong_paragraph, std::move(text)));
  return *this;
}

ReportDocument& ReportDocument::table(DocumentTable table) {
  blocks_.push_back(block(DocumentBlock::Kind::table, ""));
  blocks_.back().table = std::move(table);
  return *this;
}

ReportDocument& ReportDocument::list(std::vector<DocumentListItem> items) {
  blocks_.push_back(block(DocumentBlock::Kind::list, ""));
  blocks_.back().items = std::move(items);
  return *this;
}

ReportDocument& ReportDocument::raw(std::string output) {
  blocks_.push_back(block(DocumentBlock::Kind::raw, std::move(output)));
  return *this;
}

std::string render_markdown(const ReportDocument& document) {
  std::string md;
  for (const auto& b : document.blocks()) md += markdown_block(b);
  return md;
}

std::string render_html(const ReportDocument& document) {
  std::string html;
  for (const auto& b : document.blocks()) html += html_block(b);
  return html;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace sluice::report
