//! The findings model shared by both formats: a stable [`Severity`], a [`Sink`] that
//! receives findings as they are found, and the `codes!` table macro each format uses to
//! declare its codes (stable kebab-case names, a severity and a one-line rule per code).
//! `.tet` findings are [`crate::tet::Finding`]; cetrafs findings are
//! [`crate::cetrafs::Finding`]. Both carry a [`crate::Error`] with the field and the
//! absolute byte offset.

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Severity {
    /// A rule is broken but every byte of data can still be located and read.
    Warning,
    /// Structure or data cannot be trusted.
    Error,
}

impl Severity {
    /// `warning` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// What every finding type offers a generic consumer.
pub trait Report {
    /// The stable code's name.
    fn code_name(&self) -> &'static str;
    /// The severity.
    fn severity(&self) -> Severity;
    /// Field, offset and values.
    fn error(&self) -> &crate::Error;
}

/// Receives findings of type `F` as they are found.
pub trait Sink<F> {
    /// Called once per finding.
    fn report(&mut self, finding: &F);
}

impl<F, G: FnMut(&F)> Sink<F> for G {
    fn report(&mut self, finding: &F) {
        self(finding)
    }
}

/// A sink that keeps the first error-severity finding and ignores warnings.
#[derive(Debug)]
pub struct FirstError<F>(pub Option<F>);

impl<F> Default for FirstError<F> {
    fn default() -> Self {
        FirstError(None)
    }
}

impl<F: Report + Copy> Sink<F> for FirstError<F> {
    fn report(&mut self, finding: &F) {
        if self.0.is_none() && finding.severity() == Severity::Error {
            self.0 = Some(*finding);
        }
    }
}

/// Declares a format's `Code` enum: `Variant = "kebab-name", Severity, "rule";`.
macro_rules! codes {
    ($($variant:ident = $name:literal, $sev:ident, $doc:literal;)*) => {
        /// Stable finding codes, named after the rule broken. The string form never
        /// changes once released.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[non_exhaustive]
        pub enum Code {
            $(#[doc = $doc] $variant,)*
        }

        impl Code {
            /// Every code, in documentation order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The stable kebab-case name.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $name,)* }
            }

            /// The severity of every finding with this code.
            pub fn severity(self) -> $crate::finding::Severity {
                match self { $(Code::$variant => $crate::finding::Severity::$sev,)* }
            }

            /// The rule, in one line.
            pub fn description(self) -> &'static str {
                match self { $(Code::$variant => $doc,)* }
            }
        }
    };
}
pub(crate) use codes;
