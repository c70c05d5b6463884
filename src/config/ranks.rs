//! Rank lists, as `[logs] console` and `herd run --ranks` take them: `0`, `0,8-15`. Pure.

/// Global ranks, as inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankList(Vec<(u32, u32)>);

impl RankList {
    /// `all` is `None`: every rank.
    pub fn parse(text: &str) -> Result<Option<RankList>, String> {
        let text = text.trim();
        if text == "all" {
            return Ok(None);
        }
        let bad =
            |part: &str| format!("{part:?} is not a rank or a range of ranks (\"all\", \"0\", \"0,8-15\")");
        let mut ranges = Vec::new();
        for part in text.split(',').map(str::trim) {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let (Ok(lo), Ok(hi)) = (lo.trim().parse::<u32>(), hi.trim().parse::<u32>()) else {
                return Err(bad(part));
            };
            if lo > hi {
                return Err(format!("{part:?}: the range runs backwards"));
            }
            ranges.push((lo, hi));
        }
        Ok(Some(RankList(ranges)))
    }

    pub fn contains(&self, rank: u32) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&rank))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges_parse_and_all_means_every_rank() {
        assert_eq!(RankList::parse("all"), Ok(None));
        let l = RankList::parse("0, 8-15").unwrap().unwrap();
        assert!(l.contains(0) && l.contains(8) && l.contains(15));
        assert!(!l.contains(1) && !l.contains(16));
        for bad in ["", "x", "3-", "-3", "5-2", "1,,2", "all,0"] {
            assert!(RankList::parse(bad).is_err(), "{bad:?}");
        }
    }
}
