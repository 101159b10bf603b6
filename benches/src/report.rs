//! A plain-text table with aligned columns, for the end-to-end benchmark's output (and to
//! paste into `benches/README.md` as Markdown).

/// Rows of cells under a header.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new<I, S>(header: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are empty, extra cells are kept).
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The table as Markdown with padded columns.
    pub fn to_markdown(&self) -> String {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let cell = |row: &[String], i: usize| row.get(i).cloned().unwrap_or_default();
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                self.rows
                    .iter()
                    .chain([&self.header])
                    .map(|r| cell(r, i).chars().count())
                    .max()
                    .unwrap_or(0)
                    .max(3)
            })
            .collect();
        let line = |row: &[String]| {
            let cells: Vec<String> = widths
                .iter()
                .enumerate()
                .map(|(i, w)| format!("{:<w$}", cell(row, i), w = *w))
                .collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut out = line(&self.header);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }
}

/// `1234567.8` → `"1,234,568"`.
pub fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{}", rounded.abs() as u64);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}
