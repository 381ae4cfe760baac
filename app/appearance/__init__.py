"""The deployment's appearance (Coder's appearance settings): its name and logo, a service banner, announcement
banners with an optional time window, and support links; and the header's inbox count."""
